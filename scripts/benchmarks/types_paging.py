"""docs/sync.md's generated figures of a sync of chosen types, from a run of
`scripts/bench-types-paging` (scripts/bench_types_paging.py) as it saved it, through
the benchmarks page's machinery (page.Generated): the JSON kept as
`docs/benchmarks/types-paging.json`, its hash in `types-paging.sha256`; scripts/check
fails when the section is stale (scripts/generated.py). No plot: a few read units.
`python -m scripts.benchmarks.types_paging RUN.json` writes the section again.
"""

from __future__ import annotations

import sys
from typing import Any

from scripts.benchmarks.page import FOLDER, Generated, at_commit, measured

JSON_NAME = "types-paging.json"
BEGIN = (
    "<!-- BEGIN scripts/bench-types-paging: generated from benchmarks/types-paging.json, "
    "do not edit -->"
)
END = "<!-- END scripts/bench-types-paging -->"
CURRENT = "after"  # the rows of this checkout's code (`before`: an earlier commit's)


def section(saved: dict[str, Any]) -> str:
    """When, where and how once; then the current code's syncs of each tenant."""
    lines = [
        BEGIN,
        "",
        f"{measured(saved['command'], saved)}, {at_commit(saved)}, on DynamoDB Local: "
        f"tenants of {saved['records']:,} records, each sync a first sync followed to its "
        "end. Read units are what DynamoDB Local reports (ConsumedCapacity): the load "
        "does not change them. Every figure below is from that run's saved JSON, "
        f"[{FOLDER}/{JSON_NAME}]({FOLDER}/{JSON_NAME}).",
        "",
        "| tenant | sync | items | requests | DynamoDB calls | read units "
        "| / whole tenant's | pages of 100 / of 1,000 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in saved["rows"]:
        if r["code"] != CURRENT:
            continue
        per_1000 = "" if r["per_1000"] is None else f"{r['per_1000']:.2f}"
        lines.append(
            f"| {r['tenant']} | {r['sync']} | {r['items']:,} | {r['requests']} "
            f"| {r['calls']} | {r['read_units']:.1f} | {r['x_whole']:.2f} | {per_1000} |"
        )
    lines += ["", END]
    return "\n".join(lines)


PAGE = Generated(
    page="sync.md",
    json_name=JSON_NAME,
    manifest="types-paging.sha256",
    begin=BEGIN,
    end=END,
    section=section,
    module="scripts.benchmarks.types_paging",
)


if __name__ == "__main__":
    sys.exit(PAGE.main())
