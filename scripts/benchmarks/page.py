"""The generated section of docs/benchmarks.md and its plots, from a run's saved JSON;
and the machinery every generated page shares (`Generated`: docs/cold-start.md's is
scripts/benchmarks/cold_start.py).

`scripts/bench` calls `write` after a run: the JSON is copied to
`docs/benchmarks/bench.json`, the plots are drawn from it beside it, and the page's
section between `BEGIN` and `END` is replaced by `section(saved)`. `stale` says what
no longer matches (scripts/check): the section is rendered again from the committed
JSON and compared; the plots are compared by content hash with `plots.sha256`, which
records the JSON's hash and each plot's (not modification times: a clone resets them).
`python -m scripts.benchmarks.page RUN.json` writes the page from a saved run again.
A command whose modes run separately keeps them as parts of one JSON (`Generated.parts`:
scripts/benchmarks/metrics_cost.py's), each run replacing its own part.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import platform
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from api.settings import PROJECT_ROOT
from scripts.benchmarks.datastore import verdicts

DOCS = PROJECT_ROOT / "docs"
PAGE = "benchmarks.md"
RESULTS = PROJECT_ROOT / ".bench-results"  # every run's JSON, not committed
FOLDER = "benchmarks"  # beside the page: bench.json, the plots, plots.sha256
JSON_NAME = "bench.json"
MANIFEST = "plots.sha256"
OPERATIONS_PLOT = "operations.png"
COST_PLOT = "cost.png"
PLOTS = (OPERATIONS_PLOT, COST_PLOT)
BEGIN = "<!-- BEGIN scripts/bench: generated from benchmarks/bench.json, do not edit -->"
END = "<!-- END scripts/bench -->"

# The all-in cost's parts, in the order they are stacked.
COST_PARTS = {
    "http_api": "HTTP API",
    "lambda_requests": "Lambda requests",
    "lambda_duration": "Lambda duration",
    "dynamodb": "DynamoDB",
    "s3": "S3",
    "cloudwatch": "CloudWatch Logs",
}


def command(saved: dict[str, Any]) -> str:
    return f"scripts/bench --{saved['mode']}"


def machine(load_at_start: float) -> dict[str, Any]:
    """This machine as a run states it: what it is (not its name) and its load average
    at the run's start and end (other work inflates every time measured)."""
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_average": [load_at_start, os.getloadavg()[0]],
    }


def commit() -> dict[str, Any]:
    """The commit a run measured, and whether the work tree's api/ and Lambda lock (what
    the code and bundles measured are made of) differed from it."""

    def git(*args: str) -> str:
        run = subprocess.run(["git", *args], cwd=PROJECT_ROOT, capture_output=True, text=True)
        return run.stdout.strip()

    changed = git("status", "--porcelain", "--", "api", "requirements-lambda.txt")
    return {"commit": git("rev-parse", "--short", "HEAD"), "uncommitted_changes": bool(changed)}


def measured(command: str, saved: dict[str, Any]) -> str:
    """A section's first words: the command, when and where, stated once."""
    machine = saved["machine"]
    load = machine.get("load_average")
    loaded = "" if load is None else f", load average {load[0]:.1f} / {load[1]:.1f} (start / end)"
    when = saved["date"].replace("T", " ").replace("+00:00", " UTC")
    return (
        f"Measured by `{command}` on {when}, on {machine['platform']} with "
        f"{machine['cpus']} CPUs{loaded}"
    )


def at_commit(saved: dict[str, Any]) -> str:
    """The commit a run measured, as a section states it (page.commit saved it)."""
    changed = " with uncommitted changes to api/" if saved["uncommitted_changes"] else ""
    return f"at commit {saved['commit']}{changed}"


def section(saved: dict[str, Any]) -> str:
    """The page's generated section: when, where and how once, then the figures."""
    lines = [
        BEGIN,
        "",
        f"{measured(command(saved), saved)}, Python {saved['machine']['python']}, against "
        f"DynamoDB Local and the local S3 engine. Prices: {saved['prices']}. Every figure "
        f"below is from that run's saved JSON, [{FOLDER}/{JSON_NAME}]({FOLDER}/{JSON_NAME}).",
        "",
        "### Each operation against its floors",
        "",
        f"![p50 of each operation against the raw call and the floors]({FOLDER}/{OPERATIONS_PLOT})",
        "",
        "| operation | clients | p50 ms | raw ms | / raw | floor ms | / floor "
        "| library floor ms | library / floor | units | $ per million (DynamoDB) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in saved["rows"]:
        floor, lib = r.get("floor_p50_ms"), r.get("library_p50_ms")
        lines.append(
            f"| {_label(r['operation'])} | {r['clients']} | {r['p50_ms']:.2f} "
            f"| {r['raw_p50_ms']:.2f} | {r['ratio_p50']:.2f} "
            f"| {_num(floor)} | {_num(r.get('floor_ratio_p50'))} "
            f"| {_num(lib)} | {_num(r.get('library_floor_ratio_p50'))} "
            f"| {r['read_units']:g} read + {r['write_units']:g} write "
            f"| {r['cost_per_million_usd']:.3f} |"
        )
    cost = saved["cost"]
    lines += [
        "",
        "### All in, against AppSync",
        "",
        f"![all-in cost per million operations against AppSync]({FOLDER}/{COST_PLOT})",
        "",
        f"$ per million operations, Lambda at {cost['memory_mb']} MB on "
        f"{cost['architecture']} (serverless.yml):",
        "",
        "| operation | billed ms | "
        + " | ".join(COST_PARTS.values())
        + " | total | AppSync | AppSync / total | equal at (billed ms) "
        + "| AppSync + DataStore's own writes | its / total |",
        "|---|---|" + "---|" * len(COST_PARTS) + "---|---|---|---|---|---|",
    ]
    for name, c in cost["operations"].items():
        parts = " | ".join(f"{c.get(k, 0):.3f}" for k in COST_PARTS)
        found = c.get("appsync_datastore")
        compared = f"{found['total']:.2f} | {found['total'] / c['total']:.2f}" if found else " | "
        lines.append(
            f"| {name} | {c['billed_ms']:.1f} | {parts} | {c['total']:.2f} "
            f"| {c['appsync']:.2f} | {c['appsync'] / c['total']:.2f} "
            f"| {c['crossover_ms']:.0f} | {compared} |"
        )
    lines += [
        "",
        "By this run's figures (a write against AppSync with DataStore's own writes):",
        "",
    ]
    lines += [f"- {line[0].upper()}{line[1:]}." for line in verdicts(cost["operations"])]
    lines += [
        "",
        "### Every table of the run",
        "",
        "As `scripts/bench` printed them (the same function, given the saved JSON):",
        "",
        "```text",
        _printed(saved).strip("\n"),
        "```",
        "",
        END,
    ]
    return "\n".join(lines)


def _label(operation: str) -> str:
    """A row's operation; the push's second row names what it is compared with."""
    if operation.startswith(" "):
        return f"pushChanges: 100 updates, {operation.strip()}"
    return operation


def _num(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}"


def _printed(saved: dict[str, Any]) -> str:
    # The run's own printing, one source of format; it imports every benchmark's module,
    # which scripts/check's freshness check of this page does not need.
    from scripts.benchmarks.report import report

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        report(saved)
    return out.getvalue()


def pyplot() -> Any:
    """matplotlib's pyplot, drawing to files only, in the plots' one style."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 9})
    return plt


def save(fig: Any, path: Path) -> None:
    """A plot as a PNG whose bytes depend on the figures alone (no version stamped:
    its hash is what scripts/check compares)."""
    fig.savefig(path, dpi=100, metadata={"Software": None})
    pyplot().close(fig)


def draw(saved: dict[str, Any], folder: Path) -> None:
    """The plots, from the saved JSON alone."""
    plt = pyplot()
    when = f"{command(saved)}, {saved['date'][:10]}"

    # Each operation with one client: the product's p50 against the raw call, the
    # floor (the raw call behind a bare route) and the library's floor.
    rows = [r for r in saved["rows"] if r["clients"] == 1]
    series = (
        ("raw call (boto3)", "raw_p50_ms", "#a0aec0"),
        ("floor: bare route", "floor_p50_ms", "#68d391"),
        ("library floor: bare Strawberry", "library_p50_ms", "#f6ad55"),
        ("this API", "p50_ms", "#3182ce"),
    )
    fig, ax = plt.subplots(figsize=(8, 0.62 * len(rows) + 2.0))
    height = 0.2
    for i, (label, key, colour) in enumerate(series):
        ys = [n + (i - 1.5) * height for n in range(len(rows))]
        xs = [r.get(key) or 0 for r in rows]
        ax.barh(ys, xs, height=height, label=label, color=colour)
    ax.set_yticks(range(len(rows)), [_label(r["operation"]).replace(", ", ",\n") for r in rows])
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("p50 ms, one client (log scale; shorter is faster)")
    ax.set_title(f"Each operation against its floors\n({when})")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2, fontsize=8, frameon=False)
    fig.tight_layout()
    save(fig, folder / OPERATIONS_PLOT)

    # All in against AppSync, one panel per operation (their scales differ 300x).
    ops = saved["cost"]["operations"]
    colours = ("#3182ce", "#63b3ed", "#90cdf4", "#f6ad55", "#68d391", "#a0aec0")
    fig, axes = plt.subplots(1, len(ops), figsize=(2.0 * len(ops) + 0.5, 3.4))
    for ax, (name, c) in zip(axes, ops.items(), strict=True):
        bottom = 0.0
        for (key, label), colour in zip(COST_PARTS.items(), colours, strict=True):
            value = c.get(key, 0.0)
            ax.bar(0, value, bottom=bottom, color=colour, label=label, width=0.6)
            bottom += value
        ax.bar(1, c["appsync"] - c["dynamodb"], color="#805ad5", label="AppSync", width=0.6)
        ax.bar(1, c["dynamodb"], bottom=c["appsync"] - c["dynamodb"], color="#f6ad55", width=0.6)
        ticks, title = ["this API", "AppSync"], f"{name}\nAppSync {c['appsync'] / c['total']:.2f}x"
        found = c.get("appsync_datastore")
        if found:  # AppSync with DataStore's own DynamoDB writes
            ax.bar(2, found["appsync_usd"], color="#805ad5", width=0.6)
            ax.bar(
                2, found["dynamodb_usd"], bottom=found["appsync_usd"], color="#f6ad55", width=0.6
            )
            ticks.append("AppSync,\nDataStore")
            title += f", {found['total'] / c['total']:.2f}x"
        ax.set_xticks(range(len(ticks)), ticks, fontsize=7)
        ax.set_title(f"{title} this API", fontsize=8)
    axes[0].set_ylabel("$ per million operations")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=7, fontsize=7, frameon=False)
    fig.suptitle(
        "All in on AWS against AppSync + the same DynamoDB, and (writes) + DataStore's own "
        f"writes ({when})",
        fontsize=9,
    )
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    save(fig, folder / COST_PLOT)


@dataclass(frozen=True)
class Generated:
    """A page's section between `begin` and `end`, and its plots, generated from a run's
    JSON kept as `folder/json_name`; `manifest` records the JSON's hash and each plot's."""

    page: str
    json_name: str
    manifest: str
    begin: str
    end: str
    section: Callable[[dict[str, Any]], str]
    module: str  # `python -m MODULE RUN.json` writes the page from a saved run again
    plots: tuple[str, ...] = ()
    draw: Callable[[dict[str, Any], Path], None] | None = None  # draws `plots` into a folder
    folder: str = FOLDER
    # A command's modes, run separately, kept in one JSON as {part: its last run}: a run
    # of one (its "part" says which) replaces that part and keeps the others.
    parts: tuple[str, ...] = ()

    def combined(self, saved: dict[str, Any], docs: Path = DOCS) -> dict[str, Any]:
        """The JSON to keep: a run of one part with the other parts' runs kept in
        `docs` (None where none was); any other JSON as it is."""
        if not self.parts or "part" not in saved:
            return saved
        if saved["part"] not in self.parts:
            raise ValueError(f"{saved['part']!r} is none of {self.parts}")
        path = docs / self.folder / self.json_name
        kept = json.loads(path.read_text()) if path.exists() else {}
        return {p: saved if p == saved["part"] else kept.get(p) for p in self.parts}

    def write(self, saved: dict[str, Any], docs: Path = DOCS) -> Path:
        """The run into `docs`: its JSON, plots, their hashes and the page's section."""
        saved = self.combined(saved, docs)
        if "machine" in saved:  # a machine is what it is, not its name (older runs saved it)
            machine = {k: v for k, v in saved["machine"].items() if k != "node"}
            saved = {**saved, "machine": machine}
        folder = docs / self.folder
        folder.mkdir(parents=True, exist_ok=True)
        (folder / self.json_name).write_text(json.dumps(saved, indent=2) + "\n")
        if self.draw is not None:
            self.draw(saved, folder)
        (folder / self.manifest).write_text(self._manifest(folder))
        page = docs / self.page
        if not page.exists():  # a folder of its own (the test's): the page as committed
            page.write_text((DOCS / self.page).read_text())
        page.write_text(self._replaced(page.read_text(), self.section(saved)))
        return page

    def _manifest(self, folder: Path) -> str:
        names = (self.json_name, *self.plots)
        return "".join(f"{_sha256(folder / n)}  {self.folder}/{n}\n" for n in names)

    def _replaced(self, text: str, generated: str) -> str:
        if text.count(self.begin) != 1 or text.count(self.end) != 1:
            raise ValueError(f"{self.page} needs one {self.begin!r} and one {self.end!r}")
        head, rest = text.split(self.begin)
        _, tail = rest.split(self.end)
        return head + generated + tail

    def stale(self, docs: Path = DOCS) -> list[str]:
        """What of the page and its plots was not generated from the committed JSON."""
        folder = docs / self.folder
        saved_path, manifest = folder / self.json_name, folder / self.manifest
        again = f"run python -m {self.module} {saved_path}"
        if not saved_path.exists() or not manifest.exists():
            return [f"{saved_path} or {manifest} is missing: {again} (or the bench)"]
        problems = []
        text = (docs / self.page).read_text()
        saved = json.loads(saved_path.read_text())
        fresh = text.count(self.begin) == 1 and text.count(self.end) == 1
        if not fresh or self._replaced(text, self.section(saved)) != text:
            problems.append(
                f"{docs / self.page}: its generated section is not {saved_path} rendered: {again}"
            )
        if manifest.read_text() != self._manifest(folder):
            problems.append(
                f"{manifest}: the plots were not drawn from {saved_path} as it is "
                f"(or were edited): {again}"
            )
        return problems

    def options(self, parser: argparse.ArgumentParser) -> None:
        """A bench command's --out and --page, for `keep`."""
        parser.add_argument("--out", type=Path, default=RESULTS, help="default .bench-results/")
        parser.add_argument("--page", type=Path, default=DOCS, help=f"where {self.page} is written")

    def keep(self, saved: dict[str, Any], out: Path, docs: Path = DOCS) -> None:
        """A bench command's run: its JSON into `out`, dated, then the page from it."""
        out.mkdir(parents=True, exist_ok=True)
        part = f"{saved['part']}-" if "part" in saved else ""
        stamp = saved["date"].replace(":", "").replace("-", "")[:15]
        path = out / f"{stamp}Z-{part}{self.json_name}"
        path.write_text(json.dumps(saved, indent=2) + "\n")
        print(f"\nsaved {path}")
        print(f"wrote {self.write(saved, docs)} from it")

    def main(self, argv: list[str] | None = None) -> int:
        parser = argparse.ArgumentParser(description=f"{self.page} again from a saved run")
        parser.add_argument("saved", type=Path, help="a run's JSON (.bench-results/...)")
        parser.add_argument("--docs", type=Path, default=DOCS, help="default docs/")
        args = parser.parse_args(argv)
        page = self.write(json.loads(args.saved.read_text()), args.docs)
        print(f"wrote {page} and its plots in {args.docs / self.folder}")
        return 0


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


BENCH = Generated(
    PAGE, JSON_NAME, MANIFEST, BEGIN, END, section, "scripts.benchmarks.page", PLOTS, draw
)
write, stale, main = BENCH.write, BENCH.stale, BENCH.main


if __name__ == "__main__":
    sys.exit(main())
