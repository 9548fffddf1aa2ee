"""docs/attachments.md's generated figures of the local S3 engine's memory, from a run of
`scripts/bench-local-s3` (scripts/bench_local_s3.py) as it saved it, through the
benchmarks page's machinery (page.Generated): the JSON kept as
`docs/benchmarks/local-s3.json`, its hash in `local-s3.sha256`; scripts/check fails when
the section is stale (scripts/generated.py). The rows are the command's own, as it
printed them. `python -m scripts.benchmarks.local_s3 RUN.json` writes it again.
"""

from __future__ import annotations

import sys
from typing import Any

from scripts.benchmarks.page import FOLDER, Generated, at_commit, measured

JSON_NAME = "local-s3.json"
BEGIN = (
    "<!-- BEGIN scripts/bench-local-s3: generated from benchmarks/local-s3.json, do not edit -->"
)
END = "<!-- END scripts/bench-local-s3 -->"


def section(saved: dict[str, Any]) -> str:
    """When, where and how once; then each step as the command printed it."""
    lines = [
        BEGIN,
        "",
        f"{measured(saved['command'], saved)}, {at_commit(saved)}. From that run's saved "
        f"JSON, [{FOLDER}/{JSON_NAME}]({FOLDER}/{JSON_NAME}):",
        "",
        f"| step ({saved['size']:,}-byte blobs) | result |",
        "|---|---|",
        *(f"| {step} | {what} |" for step, what in saved["rows"]),
        "",
        END,
    ]
    return "\n".join(lines)


PAGE = Generated(
    page="attachments.md",
    json_name=JSON_NAME,
    manifest="local-s3.sha256",
    begin=BEGIN,
    end=END,
    section=section,
    module="scripts.benchmarks.local_s3",
)


if __name__ == "__main__":
    sys.exit(PAGE.main())
