"""Fails when a generated file in docs/ is stale: `python -m scripts.generated` (scripts/check).

- each picture drawn from a source (docs/NAME.dot -> NAME.png, scripts/draw) must match
  the SHA-256 of both recorded beside it in NAME.png.sha256;
- docs/benchmarks.md's generated section and its plots must be what scripts/bench
  makes of the committed docs/benchmarks/bench.json (scripts/benchmarks/page.py), and
  so must the figures docs/sync.md and docs/realtime.md quote from that run
  (scripts/benchmarks/quoted.py); docs/cold-start.md's section and plot what
  scripts/bench-cold-start makes of docs/benchmarks/cold-start.json
  (scripts/benchmarks/cold_start.py), and
  docs/sync.md's figures of a sync of chosen types what scripts/bench-types-paging
  makes of docs/benchmarks/types-paging.json (scripts/benchmarks/types_paging.py),
  and its figures of a push what scripts/bench-push makes of
  docs/benchmarks/push.json (scripts/benchmarks/push.py), and docs/operations.md's
  figures of the metrics' cost what scripts/bench-metrics makes of
  docs/benchmarks/metrics.json (scripts/benchmarks/metrics_cost.py), and
  docs/contract.md's figures of an export's calls what scripts/bench-hostile exports
  makes of docs/benchmarks/exports.json (scripts/benchmarks/exports.py), and
  docs/attachments.md's figures of the local S3 engine what scripts/bench-local-s3
  makes of docs/benchmarks/local-s3.json (scripts/benchmarks/local_s3.py).

By content, not modification times: a clone sets every file's time to the checkout's.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

from scripts.benchmarks import (
    cold_start,
    exports,
    local_s3,
    metrics_cost,
    page,
    push,
    quoted,
    types_paging,
)

# Every page with a section generated from a run's saved JSON.
PAGES = (
    page.BENCH,
    *quoted.PAGES,
    cold_start.PAGE,
    types_paging.PAGE,
    push.PAGE,
    metrics_cost.PAGE,
    exports.PAGE,
    local_s3.PAGE,
)


def stale_pictures(docs: Path = page.DOCS) -> list[str]:
    problems = []
    for source in sorted(docs.glob("*.dot")):
        picture = source.with_suffix(".png")
        record = picture.with_name(picture.name + ".sha256")
        if not picture.exists() or not record.exists():
            problems.append(f"{picture} or {record} is missing: run scripts/draw")
            continue
        expected = {}
        for line in record.read_text().splitlines():
            digest, name = line.split(maxsplit=1)
            expected[name] = digest
        for path in (source, picture):
            if expected.get(path.name) != hashlib.sha256(path.read_bytes()).hexdigest():
                problems.append(f"{picture} was not drawn from {source} as it is: run scripts/draw")
                break
    return problems


def stale(docs: Path = page.DOCS) -> list[str]:
    return stale_pictures(docs) + [p for g in PAGES for p in g.stale(docs)]


def main() -> int:
    problems = stale()
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
