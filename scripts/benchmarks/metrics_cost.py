"""docs/operations.md's generated figures of what the metrics cost, from the runs of
`scripts/bench-metrics` (scripts/bench_metrics.py) as they saved them, through the
benchmarks page's machinery (page.Generated): the JSON kept as
`docs/benchmarks/metrics.json`, its hash in `metrics.sha256`; scripts/check fails when
the section is stale (scripts/generated.py). The command's two modes are separate runs,
each the JSON's part of its name: `requests` (by the clock and in CPU, and the cold
starts) and `instructions` (`--instructions`, counted under cachegrind); a run replaces
its part and keeps the other. No plot: a few ratios near 1.
`python -m scripts.benchmarks.metrics_cost RUN.json` writes the section again.
"""

from __future__ import annotations

import sys
from typing import Any

from scripts.benchmarks.page import FOLDER, Generated, at_commit, measured

JSON_NAME = "metrics.json"
BEGIN = "<!-- BEGIN scripts/bench-metrics: generated from benchmarks/metrics.json, do not edit -->"
END = "<!-- END scripts/bench-metrics -->"
PARTS = ("requests", "instructions")
ALONE = {
    "requests": "scripts/bench-metrics --cold-rounds 21",
    "instructions": "scripts/bench-metrics --instructions",
}


def section(saved: dict[str, Any]) -> str:
    """Each part's when, where and how once, then its figures; a part not run yet says
    how to run it."""
    lines = [
        BEGIN,
        "",
        f"Every figure below is from the runs' saved JSON, [{FOLDER}/{JSON_NAME}]"
        f"({FOLDER}/{JSON_NAME}).",
    ]
    for part, render in (("requests", _requests), ("instructions", _instructions)):
        run = saved.get(part)
        lines += [""] + (render(run) if run else [f"Not measured yet: run `{ALONE[part]}`."])
    lines += ["", END]
    return "\n".join(lines)


def _requests(run: dict[str, Any]) -> list[str]:
    lines = [
        f"{measured(run['command'], run)}, {at_commit(run)}: {run['rounds']} rounds of "
        f"{run['calls']} calls, each side making each call in turn. ms and CPU ms (this "
        "process, every thread) are the medians of the rounds' means; `/ off` the median "
        "of the rounds' ratios to the same place with metrics off; sink µs the CPU of "
        "`Metrics.request` (the line and the metrics), and its share beyond off's of "
        "off's request CPU. The clock moves with the machine's load more than the "
        "metrics cost; the instruction counts below do not.",
        "",
        "| request | where | ms | / off | CPU ms | / off | sink µs | sink share |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in run["rows"]:
        lines.append(
            f"| {r['operation']} | {r['where']} | {r['ms']:.3f} | {r['ms_ratio']:.3f} "
            f"| {r['cpu_ms']:.3f} | {r['cpu_ratio']:.3f} | {r['sink_us']:.1f} "
            f"| {r['sink_share']:.1%} |"
        )
    cold = run["cold_start"]
    off = cold["off"]
    lines += [
        "",
        f"A cold start, {run['cold_rounds']} rounds (a fresh process importing "
        "`api.lambda_handler` and answering one poll, start to exit; CPU: the child's "
        "user and system):",
        "",
        "| METRICS | min ms | median ms | / off | CPU min ms | / off | CPU median ms | / off |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for kind, c in cold.items():
        lines.append(
            f"| {kind} | {c['min_ms']:.0f} | {c['median_ms']:.0f} "
            f"| {c['median_ms'] / off['median_ms']:.3f} "
            f"| {c['min_cpu_ms']:.0f} | {c['min_cpu_ms'] / off['min_cpu_ms']:.3f} "
            f"| {c['median_cpu_ms']:.0f} | {c['median_cpu_ms'] / off['median_cpu_ms']:.3f} |"
        )
    return lines


def _instructions(run: dict[str, Any]) -> list[str]:
    few_many = "; ".join(f"{op}: {n['many']} less {n['few']}" for op, n in run["requests"].items())
    lines = [
        f"{measured(run['command'], run)}, {at_commit(run)}: instructions of the "
        "Lambda's process under cachegrind, which the load does not change. A request's: "
        "the difference between a child serving many requests and one serving few, per "
        f"request ({few_many}); a cold start's: the whole child, importing the handler "
        "and serving one poll.",
        "",
        "| | METRICS=off | METRICS=emf | emf / off |",
        "|---|---|---|---|",
    ]
    rows = {**run["per_request"], "cold start": run["cold_start"]}
    for name, kinds in rows.items():
        lines.append(
            f"| {name} | {kinds['off']:,.0f} | {kinds['emf']:,.0f} "
            f"| {kinds['emf'] / kinds['off']:.4f} |"
        )
    return lines


PAGE = Generated(
    page="operations.md",
    json_name=JSON_NAME,
    manifest="metrics.sha256",
    begin=BEGIN,
    end=END,
    section=section,
    module="scripts.benchmarks.metrics_cost",
    parts=PARTS,
)


if __name__ == "__main__":
    sys.exit(PAGE.main())
