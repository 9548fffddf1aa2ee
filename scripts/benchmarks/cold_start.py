"""docs/cold-start.md's generated section and its plot, from a run of
`scripts/bench-cold-start` (scripts/bench_cold_start.py) as it saved it, through the
machinery of the benchmarks page (page.Generated): the JSON kept as
`docs/benchmarks/cold-start.json`, the plot beside it, their hashes in
`cold-start.sha256`; scripts/check fails when they are stale (scripts/generated.py).
`python -m scripts.benchmarks.cold_start RUN.json` writes the page from a saved run again.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from scripts.benchmarks.page import FOLDER, Generated, at_commit, measured, pyplot, save

JSON_NAME = "cold-start.json"
PLOT = "cold-start.png"
BEGIN = (
    "<!-- BEGIN scripts/bench-cold-start: generated from benchmarks/cold-start.json, "
    "do not edit -->"
)
END = "<!-- END scripts/bench-cold-start -->"
SHIPPED = "shipped"
# The goals (minimum times): what a device waits for first, within 1.3x the floor;
# a function without SnapStart (serverless.yml gives it to all but the sweep),
# at least 2x faster than the earlier bundle's.
FLOOR_GOAL = 1.3
HELD_TO_FLOOR = ("HTTP: import", "realtime: import + $connect")
BEFORE_GOAL = 2.0
WITHOUT_SNAPSTART = ("sweep: import + first round",)
# One colour a bundle, in the order the run measures them: the shipped bundle as
# this API's bars on the benchmarks page, the others paler.
COLOURS = ("#3182ce", "#90cdf4", "#a0aec0")


def _kind(kind: str) -> str:
    return kind.replace("$connect", "`$connect`")


def section(saved: dict[str, Any]) -> str:
    """When, where and how once; each bundle against its floor; each bundle against
    the shipped one; the goals."""
    bundles, floor, rounds = saved["bundles"], saved["floor"], saved["rounds"]
    lines = [
        BEGIN,
        "",
        f"{measured(saved['command'], saved)}, {at_commit(saved)}, by the runtime's Python "
        f"{saved['python']}: {rounds} interleaved rounds, {saved['measure']}. Every "
        f"figure below is from that run's saved JSON, [{FOLDER}/{JSON_NAME}]"
        f"({FOLDER}/{JSON_NAME}).",
        "",
        f"![each function's cold start against its floor, by bundle]({FOLDER}/{PLOT})",
        "",
        f"Each bundle, each point from the process's start: the minimum time of {rounds} "
        "rounds, the median and the minimum CPU time (user and system), each also as a "
        "ratio to the same bundle's floor; then the step alone (the invocation since the "
        "point before; an import is its own), minimum and median:",
    ]
    for bundle, kinds in bundles.items():
        base = kinds[floor]
        lines += [
            "",
            f"| {bundle} | min ms | / floor | median ms | / floor | CPU ms | / floor "
            "| step min ms | step median ms |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for kind, f in kinds.items():
            lines.append(
                f"| {_kind(kind)} | {f['min_ms']:,.0f} | {f['min_ms'] / base['min_ms']:.2f} "
                f"| {f['median_ms']:,.0f} | {f['median_ms'] / base['median_ms']:.2f} "
                f"| {f['min_cpu_ms']:,.0f} | {f['min_cpu_ms'] / base['min_cpu_ms']:.2f} "
                f"| {f['step_min_ms']:,.0f} | {f['step_median_ms']:,.0f} |"
            )
        exits = ", ".join(f"{n} {ms:,.0f}" for n, ms in saved["exit_ms"][bundle].items())
        lines += [
            "",
            f"Not counted, each process's exit after its last point (median ms): {exits}.",
        ]
    shipped = bundles[SHIPPED]
    others = [b for b in bundles if b != SHIPPED]
    functions = [k for k in shipped if k != floor]
    lines += [
        "",
        "Each bundle's cold start against the shipped one's, same rounds (min time; median):",
        "",
        "| | " + " | ".join(others) + " |",
        "|---|" + "---|" * len(others),
    ]
    for kind in functions:
        cells = " | ".join(
            f"{bundles[b][kind]['min_ms'] / shipped[kind]['min_ms']:.2f}; "
            f"{bundles[b][kind]['median_ms'] / shipped[kind]['median_ms']:.2f}"
            for b in others
        )
        lines.append(f"| {_kind(kind)} | {cells} |")
    lines += ["", "Against the goals (minimum times):", ""]
    for kind in HELD_TO_FLOOR:
        if kind in shipped:
            ratio = shipped[kind]["min_ms"] / shipped[floor]["min_ms"]
            lines.append(
                f"- {_kind(kind)} against its floor (shipped): {ratio:.2f}, "
                f"{'within' if ratio <= FLOOR_GOAL else 'not within'} {FLOOR_GOAL}x."
            )
    for bundle in others[1:]:  # the earlier commit's, when the run had one
        for kind in WITHOUT_SNAPSTART:
            if kind in shipped:
                faster = bundles[bundle][kind]["min_ms"] / shipped[kind]["min_ms"]
                lines.append(
                    f"- {_kind(kind)}, without SnapStart: {faster:.2f}x faster than "
                    f"{bundle.split()[0]}'s bundle, "
                    f"{'at least' if faster >= BEFORE_GOAL else 'less than'} {BEFORE_GOAL:.0f}x."
                )
    lines += ["", END]
    return "\n".join(lines)


def draw(saved: dict[str, Any], folder: Path) -> None:
    """Each function's minimum time by bundle, each bar with its ratio to its own
    bundle's floor, each bundle's floor a dashed line in its colour."""
    plt = pyplot()
    bundles, floor = saved["bundles"], saved["floor"]
    kinds = list(bundles[SHIPPED])
    fig, ax = plt.subplots(figsize=(8, 0.7 * len(kinds) + 2.0))
    height = 0.8 / len(bundles)
    for i, ((bundle, figures), colour) in enumerate(zip(bundles.items(), COLOURS, strict=False)):
        ys = [n + (i - (len(bundles) - 1) / 2) * height for n in range(len(kinds))]
        xs = [figures[k]["min_ms"] for k in kinds]
        ax.barh(ys, xs, height=height, label=bundle, color=colour)
        base = figures[floor]["min_ms"]
        ax.axvline(base, color=colour, linestyle="--", linewidth=1)
        for y, x in zip(ys, xs, strict=True):
            ax.text(x, y, f" {x / base:.2f}", va="center", fontsize=6.5)
    ax.set_yticks(range(len(kinds)), [k.replace(": ", ":\n", 1) for k in kinds])
    ax.invert_yaxis()
    ax.margins(x=0.08)
    ax.set_xlabel(
        f"ms from the process's start (exit not counted), the minimum of {saved['rounds']} "
        "rounds\nbeside each bar: / its bundle's floor (dashed); shorter is faster"
    )
    ax.set_title(
        f"Cold starts against their floor, by bundle\n({saved['command']}, {saved['date'][:10]})"
    )
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3, fontsize=8, frameon=False)
    fig.tight_layout()
    save(fig, folder / PLOT)


PAGE = Generated(
    page="cold-start.md",
    json_name=JSON_NAME,
    manifest="cold-start.sha256",
    plots=(PLOT,),
    begin=BEGIN,
    end=END,
    section=section,
    draw=draw,
    module="scripts.benchmarks.cold_start",
)


if __name__ == "__main__":
    sys.exit(PAGE.main())
