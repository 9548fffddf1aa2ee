"""docs/sync.md's generated figures of a push, from a run of `scripts/bench-push`
(scripts/bench_push.py) as it saved it, through the benchmarks page's machinery
(page.Generated): the JSON kept as `docs/benchmarks/push.json`, its hash in
`push.sha256`; scripts/check fails when the section is stale (scripts/generated.py).
`python -m scripts.benchmarks.push RUN.json` writes the section again.
"""

from __future__ import annotations

import sys
from typing import Any

from scripts.benchmarks.page import FOLDER, Generated, at_commit, measured

JSON_NAME = "push.json"
BEGIN = "<!-- BEGIN scripts/bench-push: generated from benchmarks/push.json, do not edit -->"
END = "<!-- END scripts/bench-push -->"


def section(saved: dict[str, Any]) -> str:
    """When, where and how once; then each way to push the edits, by DynamoDB."""
    edits = saved["edits"]
    lines = [
        BEGIN,
        "",
        f"{measured(saved['command'], saved)}, {at_commit(saved)}: {edits} edits of "
        f"existing people, one by one and in pushes of {saved['batch']}, through the API "
        "server to DynamoDB Local as it answers and with a delay added to each call. "
        "Calls are counted by the proxy in front of DynamoDB; times depend on the "
        "machine and its load, their ratios (`faster`, against one by one in the same "
        "run) less. Every figure below is from that run's saved JSON, "
        f"[{FOLDER}/{JSON_NAME}]({FOLDER}/{JSON_NAME}).",
        "",
        "| DynamoDB | mode | requests | DynamoDB calls | seconds | in DynamoDB | "
        "API and client | edits/s | faster |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for run in saved["runs"]:
        for r in run["rows"]:
            lines.append(
                f"| {run['dynamodb']} | {r['mode']} | {r['requests']} | {r['calls']:,} "
                f"| {r['seconds']:.2f} | {r['in_dynamodb_s']:.2f} "
                f"| {r['seconds'] - r['in_dynamodb_s']:.2f} | {edits / r['seconds']:.0f} "
                f"| {r['faster']:.1f}x |"
            )
    lines += ["", END]
    return "\n".join(lines)


PAGE = Generated(
    page="sync.md",
    json_name=JSON_NAME,
    manifest="push.sha256",
    begin=BEGIN,
    end=END,
    section=section,
    module="scripts.benchmarks.push",
)


if __name__ == "__main__":
    sys.exit(PAGE.main())
