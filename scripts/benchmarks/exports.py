"""docs/contract.md's generated figures of a tenant export's bounded calls, from a run of
`scripts/bench-hostile exports` (scripts/bench_hostile.py) as it saved it, through the
benchmarks page's machinery (page.Generated): the JSON kept as
`docs/benchmarks/exports.json`, its hash in `exports.sha256`; scripts/check fails when
the section is stale (scripts/generated.py). The rows are the command's own, as it
printed them. The section sits inside the contract's list item, so its lines are
indented as the item's. `python -m scripts.benchmarks.exports RUN.json` writes it again.
"""

from __future__ import annotations

import sys
from typing import Any

from scripts.benchmarks.page import FOLDER, Generated, at_commit, measured

JSON_NAME = "exports.json"
BEGIN = (
    "<!-- BEGIN scripts/bench-hostile exports: generated from benchmarks/exports.json, "
    "do not edit -->"
)
END = "<!-- END scripts/bench-hostile exports -->"
INDENT = "  "  # the list item's


def section(saved: dict[str, Any]) -> str:
    """When, where and how once; then each row as the command printed it."""
    lines = [
        f"{measured(saved['command'], saved)}, {at_commit(saved)}, on DynamoDB Local "
        "(`before`: the call's bounds lifted, 20 steps a call, or steps of 100 lines "
        "whatever they weigh; `after`: as shipped). "
        f"From that run's saved JSON, [{FOLDER}/{JSON_NAME}]({FOLDER}/{JSON_NAME}):",
        "",
        "| measured | figures |",
        "|---|---|",
        *(f"| {what} | {figures} |" for what, figures in saved["rows"]),
        "",
    ]
    return "\n".join([BEGIN, "", *(INDENT + line if line else "" for line in lines), INDENT + END])


PAGE = Generated(
    page="contract.md",
    json_name=JSON_NAME,
    manifest="exports.sha256",
    begin=BEGIN,
    end=END,
    section=section,
    module="scripts.benchmarks.exports",
)


if __name__ == "__main__":
    sys.exit(PAGE.main())
