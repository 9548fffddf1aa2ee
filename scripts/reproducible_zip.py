"""A folder zipped so that the same files give the same bytes: entries in sorted
order, every time set to 1980-01-01, modes 644 (755 when executable), deflated.
`python -m scripts.reproducible_zip FOLDER ZIP` (scripts/package-lambda)."""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

EPOCH = (1980, 1, 1, 0, 0, 0)  # the earliest time a zip entry can hold
# zlib's default level: the Lambda bundle (82 MB of files) zipped in 3.2 s to 30.63 MB,
# against 11.6 s to 30.54 MB at 9, the most (2026-11-26, 2 cores); a build runs twice
# in the deploy tests.
LEVEL = 6


def write(folder: Path, target: Path) -> int:
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED, compresslevel=LEVEL) as archive:
        for path in files:
            entry = zipfile.ZipInfo(path.relative_to(folder).as_posix(), EPOCH)
            mode = 0o755 if path.stat().st_mode & 0o111 else 0o644
            entry.external_attr = (0o100000 | mode) << 16  # a regular file
            entry.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(entry, path.read_bytes(), compresslevel=LEVEL)
    return len(files)


if __name__ == "__main__":
    write(Path(sys.argv[1]), Path(sys.argv[2]))
