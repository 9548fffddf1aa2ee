"""Figures other bench scripts write into the docs, each from its own saved run.

docs/cold-start.md's come from scripts/bench-cold-start: the command's own result
(`result`, from a run's timings) is saved, printed and rendered into the page's
generated section and its plot, in a folder of the test's own; a second run's figure
replaces the first's in the page and in the plot. docs/sync.md's figures of a sync of
chosen types come from scripts/bench-types-paging the same way, and of a push from
scripts/bench-push, and docs/operations.md's of the metrics' cost from each of
scripts/bench-metrics' two modes, kept as parts of one JSON. (The real commands
build bundles or seed tenants for minutes: here their measures are given, all else is
the commands'.)"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from scripts import bench_hostile, bench_local_s3, bench_metrics, bench_push, bench_types_paging
from scripts.bench_cold_start import (
    FLOOR_FUNCTION,
    FLOOR_KIND,
    FUNCTIONS,
    Function,
    Start,
    report,
    result,
    start,
)
from scripts.bench_types_paging import WHOLE, Sync
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

BUNDLES = ["shipped", "shipped, no bytecode", "274c7c3 (shipped no bytecode)"]


def _run(scale: float) -> dict[str, Any]:
    """A run's result from its starts: each function slower than the floor by its
    place, each bundle slower than the shipped one by its place, each point after
    the import 1.2x the one before; `scale` sets the figures. Every exit takes 50 ms
    after the last point (the rounds' spread: 1.0-1.5x), never counted."""
    starts: dict[tuple[str, str], list[Start]] = {}
    functions = {FLOOR_KIND: FLOOR_FUNCTION, **FUNCTIONS}
    for b, bundle in enumerate(BUNDLES):
        for k, (name, function) in enumerate(functions.items()):
            base = scale * (1 + 0.7 * b) * (1 + 0.1 * k)
            runs = []
            for f in (1.2, 1.0, 1.1, 1.5):
                at = [round(base * f * 1.2**i * 1e6) for i in range(len(function.points(name)))]
                cpu = [round(ns * 0.8) for ns in at]
                runs.append(Start(0, at, cpu, at[-1] + round(50e6 * f)))
            starts[bundle, name] = runs
    args = argparse.Namespace(rounds=4, before=Path("before"), before_name="274c7c3")
    return result(args, "3.13.5", BUNDLES, starts, load_at_start=0.5)


def _printed(saved: dict[str, Any], printer: Any = report) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        printer(saved)
    return out.getvalue()


def test_a_run_writes_the_cold_start_page_and_its_plot_and_the_next_replaces_them(
    tmp_path: Path,
) -> None:
    docs, folder = tmp_path / "docs", tmp_path / "docs" / page.FOLDER
    first = _run(scale=700)
    assert first["command"] == "scripts/bench-cold-start --rounds 4 --before 274c7c3"
    assert list(first["bundles"]) == BUNDLES and first["machine"]["cpus"]
    shipped = first["bundles"]["shipped"]
    assert shipped[FLOOR_KIND] == pytest.approx(
        {"min_ms": 700, "median_ms": 805, "min_cpu_ms": 560, "step_min_ms": 700}
        | {"step_median_ms": 805}
    )
    # Each point from the process's start; the step alone since the point before.
    assert shipped["HTTP: import + first poll"] == pytest.approx(
        {"min_ms": 924, "median_ms": 1062.6, "min_cpu_ms": 739.2, "step_min_ms": 154}
        | {"step_median_ms": 177.1}
    )
    # The exit after the last point is kept apart, never in a point's figure.
    assert first["exit_ms"]["shipped"]["HTTP"] == pytest.approx(57.5)
    assert "exit not counted" in first["measure"]
    # What the command prints: the same figures, from the saved JSON alone.
    printed = _printed(first)
    assert f"{FLOOR_KIND:<52}{700:>8.0f}{1:>9.2f}{805:>8.0f}" in printed
    assert "exit after the last point, not counted (median ms): floor" in printed

    written = cold_start.PAGE.write(first, docs)
    text = written.read_text()
    assert json.loads((folder / cold_start.JSON_NAME).read_text()) == first
    assert cold_start.section(first) in text
    assert f"`{first['command']}` on {first['date'][:10]}" in text
    assert f"at commit {first['commit']}" in text and "Python 3.13.5" in text
    # Each bundle's rows: min, its ratio to the floor, median, ratio, CPU, ratio.
    assert "process start to the handler ready, then to each first invocation's return" in text
    assert "| floor: strawberry, pynamodb, boto3 + client | 700 | 1.00 | 805 | 1.00 | 560 |" in text
    assert "| HTTP: import | 770 | 1.10 | 886 | 1.10 | 616 | 1.10 | 770 | 886 |" in text
    assert (
        "| HTTP: import + first poll | 924 | 1.32 | 1,063 | 1.32 | 739 | 1.32 | 154 | 177 |" in text
    )
    assert (
        "Not counted, each process's exit after its last point (median ms): floor 58, HTTP 58"
        in text
    )
    # The earlier commit's bundle against the shipped one: 2.40x, min and median alike.
    assert "| HTTP: import | 1.70; 1.70 | 2.40; 2.40 |" in text
    assert "- HTTP: import against its floor (shipped): 1.10, within 1.3x." in text
    assert "- realtime: import + `$connect` against its floor (shipped): 1.44, not within" in text
    sweep = "- sweep: import + first round, without SnapStart: 2.40x faster than 274c7c3's bundle"
    assert f"{sweep}, at least 2x." in text
    plot = (folder / cold_start.PLOT).read_bytes()
    assert plot.startswith(b"\x89PNG")
    assert cold_start.PAGE.stale(docs) == []
    committed = (page.DOCS / cold_start.PAGE.page).read_text()
    assert text.split(cold_start.BEGIN)[0] == committed.split(cold_start.BEGIN)[0]
    assert text.split(cold_start.END)[1] == committed.split(cold_start.END)[1]

    # The next run: one figure changed, the page's table and the plot's bar with it.
    second = copy.deepcopy(first)
    second["bundles"]["shipped"]["HTTP: import"]["min_ms"] = 1_234
    cold_start.PAGE.write(second, docs)
    text = written.read_text()
    assert cold_start.section(second) in text and cold_start.section(first) not in text
    assert "| HTTP: import | 1,234 | 1.76 |" in text and "| HTTP: import | 770 |" not in text
    assert "- HTTP: import against its floor (shipped): 1.76, not within 1.3x." in text
    assert (folder / cold_start.PLOT).read_bytes() != plot, "the plot was not redrawn"
    assert cold_start.PAGE.stale(docs) == []


def test_a_cold_start_is_timed_to_the_handler_ready_and_its_invocations_not_to_its_exit(
    tmp_path: Path,
) -> None:
    """Lambda bills and a device waits for the init (the handler's import) and the
    first invocation, never for the interpreter's exit: a start's points end where
    the process said each was reached, and an exit that takes a second (an atexit
    hook that sleeps, after writing when it began) is waited for but in no point."""
    began = tmp_path / "exit-began"
    function = Function(
        "import json",
        (("first call", "json.dumps({'answer': 42})"), ("second call", "json.loads('[1]')")),
    )
    code = function.code() + (
        "import atexit, time\n"
        "def _teardown():\n"
        f"    open({str(began)!r}, 'w').write(str(time.monotonic_ns()))\n"
        "    time.sleep(1.0)\n"
        "atexit.register(_teardown)\n"
    )
    run = start(sys.executable, code, dict(os.environ), tmp_path)
    exit_began = int(began.read_text())
    assert len(run.points_ns) == len(function.points("f")) == 3
    assert run.started_ns < run.points_ns[0] <= run.points_ns[1] <= run.points_ns[2] < exit_began
    assert run.cpu_ns == sorted(run.cpu_ns) and run.cpu_ns[0] > 0
    # Every figure ends at its point, before the exit began; the exit (its second
    # included) is the exit's figure alone.
    assert run.points_ms[-1] == (run.points_ns[-1] - run.started_ns) / 1e6
    assert run.points_ms[-1] < (exit_began - run.started_ns) / 1e6
    assert run.exited_ns - exit_began >= 1e9 and run.exit_ms >= 1000


def _paging(read_units: float) -> dict[str, Any]:
    """A run of bench-types-paging, one tenant's syncs: the chosen type's pages of 100
    read `read_units`, its pages of 1,000 and the whole tenant's as given."""
    rows = []
    for code in ("before", "after"):
        rows += [
            ("50 reminders", code, WHOLE, Sync(400.0, 6, 11, 5000), 0.0),
            ("50 reminders", code, "whole tenant, pages of 100", Sync(480.0, 51, 60, 5000), 1.2),
            ("50 reminders", code, "types, pages of 1,000", Sync(200.0, 1, 9, 50), 0.0),
            ("50 reminders", code, "types, pages of 100", Sync(read_units, 1, 9, 50), 0.0),
        ]
    rows[-1] = (*rows[-1][:4], read_units / 200.0)
    return bench_types_paging.result("03a2085", rows, load_at_start=0.5)


def test_a_run_writes_the_figures_of_a_sync_of_chosen_types_into_sync_md(
    tmp_path: Path,
) -> None:
    docs = tmp_path / "docs"
    first = _paging(230.0)
    assert first["command"] == "scripts/bench-types-paging --before 03a2085"
    assert "230.0    0.57x      1.15x" in _printed(first, bench_types_paging.report)
    written = types_paging.PAGE.write(first, docs)
    text = written.read_text()
    assert json.loads((docs / page.FOLDER / types_paging.JSON_NAME).read_text()) == first
    assert f"`{first['command']}` on {first['date'][:10]}" in text
    # This checkout's rows only (`before` is an earlier commit's, in the JSON).
    assert "| 50 reminders | types, pages of 100 | 50 | 1 | 9 | 230.0 | 0.57 | 1.15 |" in text
    assert text.count("| 50 reminders |") == 4
    assert types_paging.PAGE.stale(docs) == []
    committed = (page.DOCS / types_paging.PAGE.page).read_text()
    assert text.split(types_paging.BEGIN)[0] == committed.split(types_paging.BEGIN)[0]

    second = _paging(260.0)
    types_paging.PAGE.write(second, docs)
    text = written.read_text()
    assert "| 50 reminders | types, pages of 100 | 50 | 1 | 9 | 260.0 | 0.65 | 1.30 |" in text
    assert "230.0" not in text and types_paging.PAGE.stale(docs) == []


def test_a_run_writes_the_figures_of_a_push_into_sync_md(tmp_path: Path) -> None:
    docs = tmp_path / "docs"

    def run(push_calls: int) -> dict[str, Any]:
        rows = [("one by one (updatePerson)", 500, 1000, 20.0, 10.0)]
        rows.append(("pushChanges x100", 5, push_calls, 4.0, 3.0))
        return bench_push.result([("DynamoDB Local, history on", rows)], load_at_start=0.5)

    first = run(push_calls=40)
    assert "pushChanges x100                    5       40     4.00" in _printed(
        first, bench_push.report
    )
    written = push.PAGE.write(first, docs)
    text = written.read_text()
    assert json.loads((docs / page.FOLDER / push.JSON_NAME).read_text()) == first
    assert f"`scripts/bench-push` on {first['date'][:10]}" in text
    row = "| DynamoDB Local, history on | pushChanges x100 | 5 | {} | 4.00 | 3.00 | 1.00 | 125 "
    row += "| 5.0x |"
    assert row.format(40) in text
    assert "| one by one (updatePerson) | 500 | 1,000 | 20.00 | 10.00 | 10.00 | 25 | 1.0x |" in text
    assert push.PAGE.stale(docs) == []

    push.PAGE.write(run(push_calls=35), docs)
    text = written.read_text()
    assert row.format(35) in text and row.format(40) not in text
    assert push.PAGE.stale(docs) == []


def _metrics_requests(emf_ms: float) -> dict[str, Any]:
    """A run of bench-metrics' requests and cold starts: three rounds a side, EMF's
    and Prometheus's calls `emf_ms` and 1.05x off's by the clock, 1.02x in CPU."""
    ms: dict[tuple[str, str], list[float]] = {}
    cpu: dict[tuple[str, str], list[float]] = {}
    own: dict[str, dict[str, float]] = {}
    for where, on in (("Lambda", "Lambda, EMF"), ("server", "server, Prometheus")):
        for op in ("poll", "page of 100"):
            ms[op, on] = [emf_ms * f for f in (1.0, 1.1, 0.9)]
            ms[op, f"{where}, off"] = [emf_ms / 1.05 * f for f in (1.0, 1.1, 0.9)]
            cpu[op, on] = [2.04, 2.244, 1.836]
            cpu[op, f"{where}, off"] = [2.0, 2.2, 1.8]
            own.setdefault(on, {})[op] = 30.0
            own.setdefault(f"{where}, off", {})[op] = 10.0
    walls = {"emf": [1010.0, 1000.0, 1030.0], "off": [1000.0, 990.0, 1020.0]}
    cpus = {"emf": [909.0, 900.0, 920.0], "off": [900.0, 890.0, 910.0]}
    args = argparse.Namespace(rounds=3, calls=20, cold_rounds=3)
    return bench_metrics.result(args, ms, cpu, own, (walls, cpus), load_at_start=0.5)


def test_each_mode_of_bench_metrics_writes_its_part_of_operations_md_and_keeps_the_other(
    tmp_path: Path,
) -> None:
    docs = tmp_path / "docs"
    saved_path = docs / page.FOLDER / metrics_cost.JSON_NAME

    def counted(cold_emf: float) -> dict[str, Any]:
        per_request = {"poll": {"off": 1_000_000.0, "emf": 1_014_000.0}}
        per_request["page of 100"] = {"off": 8_000_000.0, "emf": 8_040_000.0}
        cold = {"off": 2.5e9, "emf": cold_emf}
        return bench_metrics.instructions_result(per_request, cold, load_at_start=0.5)

    # The counts first: the other mode's part says how to run it.
    first = counted(2.525e9)
    assert "cold start    METRICS=emf    2,525,000,000  1.0100" in _printed(
        first, bench_metrics.report
    )
    written = metrics_cost.PAGE.write(first, docs)
    text = written.read_text()
    assert json.loads(saved_path.read_text()) == {"requests": None, "instructions": first}
    assert "`scripts/bench-metrics --instructions` on " + first["date"][:10] in text
    assert "| poll | 1,000,000 | 1,014,000 | 1.0140 |" in text
    assert "| cold start | 2,500,000,000 | 2,525,000,000 | 1.0100 |" in text
    assert "Not measured yet: run `scripts/bench-metrics --cold-rounds 21`." in text
    assert metrics_cost.PAGE.stale(docs) == []
    committed = (page.DOCS / metrics_cost.PAGE.page).read_text()
    assert text.split(metrics_cost.BEGIN)[0] == committed.split(metrics_cost.BEGIN)[0]
    assert text.split(metrics_cost.END)[1] == committed.split(metrics_cost.END)[1]

    # The clock's run: its part written, the counts kept.
    timed = _metrics_requests(emf_ms=4.2)
    assert timed["command"] == "scripts/bench-metrics --rounds 3 --calls 20 --cold-rounds 3"
    row = "poll          Lambda, EMF              4.200   1.050   2.040   1.020     30.0    1.0%"
    assert row in _printed(timed, bench_metrics.report)
    metrics_cost.PAGE.write(timed, docs)
    text = written.read_text()
    assert json.loads(saved_path.read_text()) == {"requests": timed, "instructions": first}
    assert "| poll | Lambda, EMF | 4.200 | 1.050 | 2.040 | 1.020 | 30.0 | 1.0% |" in text
    assert "| poll | Lambda, off | 4.000 | 1.000 | 2.000 | 1.000 | 10.0 | 0.0% |" in text
    # Cold starts: the medians' ratio by the clock, the minimums' and medians' in CPU.
    assert "| emf | 1000 | 1010 | 1.010 | 900 | 1.011 | 909 | 1.010 |" in text
    assert "| cold start | 2,500,000,000 | 2,525,000,000 | 1.0100 |" in text
    assert "Not measured yet" not in text and metrics_cost.PAGE.stale(docs) == []

    # The next count replaces its part alone.
    metrics_cost.PAGE.write(counted(2.55e9), docs)
    text = written.read_text()
    assert "| cold start | 2,500,000,000 | 2,550,000,000 | 1.0200 |" in text
    assert "1.0100" not in text and "| poll | Lambda, EMF | 4.200 |" in text
    assert metrics_cost.PAGE.stale(docs) == []


def test_a_run_of_bench_writes_the_figures_sync_md_and_realtime_md_quote_from_it(
    tmp_path: Path,
) -> None:
    docs = tmp_path / "docs"
    saved = json.loads((page.DOCS / page.FOLDER / page.JSON_NAME).read_text())
    saved["write_units"]["push of 100 updates"] = {"cold": 812.0, "hot": 790.0}
    saved["write_units"]["update"] = {"cold": 12.0, "hot": 10.0}
    rt = saved["realtime_cost"]
    shipped = next(iter(rt["device_hour"]))
    rt["device_hour"][shipped]["total"] = 57.6  # twice AppSync's 28.80
    rt["polling"]["par_interval_min"] = 3.04
    quoted.write(saved, docs)
    sync = (docs / quoted.WRITE_UNITS.page).read_text()
    assert "a push of 100 updates costs 7.90 write units per update" in sync
    assert "against 10 for one update alone" in sync and "8.12 (" in sync
    assert f"`scripts/bench --{saved['mode']}` on {saved['date'][:10]}" in sync
    realtime = (docs / quoted.REALTIME.page).read_text()
    assert f"| {shipped} | 57.60 | 28.80 | 2.00 |" in realtime
    assert "one poll every 3.0 minutes" in realtime
    assert "The shipped socket costs 2.0x AppSync's device-hour" in realtime
    # The prose around each section is the committed page's.
    for quoting, text in ((quoted.WRITE_UNITS, sync), (quoted.REALTIME, realtime)):
        committed = (page.DOCS / quoting.page).read_text()
        assert text.split(quoting.begin)[0] == committed.split(quoting.begin)[0]
        assert text.split(quoting.end)[1] == committed.split(quoting.end)[1]
        assert quoting.stale(docs) == []

    # The next run's figure replaces the first's.
    saved["write_units"]["push of 100 updates"]["hot"] = 805.0
    quoted.write(saved, docs)
    sync = (docs / quoted.WRITE_UNITS.page).read_text()
    assert "costs 8.05 write units per update" in sync and "7.90" not in sync
    assert quoted.WRITE_UNITS.stale(docs) == []


def test_a_run_of_bench_hostile_exports_writes_its_rows_into_the_contracts_list_item(
    tmp_path: Path,
) -> None:
    docs = tmp_path / "docs"
    what = "export of 50,000 deletions, after: calls; per call max read units, max write units"

    def run(reads: int) -> dict[str, Any]:
        return bench_hostile.exports_result([(what, f"52; {reads}, 3, 0.41")], load_at_start=0.5)

    first = run(161)
    written = exports.PAGE.write(first, docs)
    text = written.read_text()
    assert json.loads((docs / page.FOLDER / exports.JSON_NAME).read_text()) == first
    assert f"  Measured by `scripts/bench-hostile exports` on {first['date'][:10]}" in text
    # Indented as the list item it sits in, so the item goes on after it.
    assert f"\n  | {what} | 52; 161, 3, 0.41 |\n" in text
    section = text.split(exports.BEGIN)[1].split(exports.END)[0]
    assert all(not line or line.startswith("  ") for line in section.splitlines()[1:])
    assert exports.PAGE.stale(docs) == []
    committed = (page.DOCS / exports.PAGE.page).read_text()
    assert text.split(exports.BEGIN)[0] == committed.split(exports.BEGIN)[0]
    assert text.split(exports.END)[1] == committed.split(exports.END)[1]

    exports.PAGE.write(run(170), docs)
    text = written.read_text()
    assert "| 52; 170, 3, 0.41 |" in text and "| 52; 161, 3, 0.41 |" not in text
    assert exports.PAGE.stale(docs) == []


def test_a_run_of_bench_local_s3_writes_its_rows_into_attachments_md(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    args = argparse.Namespace(blobs=30_000, kept=20_000, size=1024, rounds=3, refill=2_000)

    def run(rss: int) -> dict[str, Any]:
        rows = [("engine started on it (50,000 objects)", f"9 s, {rss} MB")]
        return bench_local_s3.result(args, rows, load_at_start=0.5)

    first = run(500)
    written = local_s3.PAGE.write(first, docs)
    text = written.read_text()
    assert json.loads((docs / page.FOLDER / local_s3.JSON_NAME).read_text()) == first
    assert f"`{first['command']}` on {first['date'][:10]}" in text
    assert "| step (1,024-byte blobs) | result |" in text
    assert "| engine started on it (50,000 objects) | 9 s, 500 MB |" in text
    assert local_s3.PAGE.stale(docs) == []
    committed = (page.DOCS / local_s3.PAGE.page).read_text()
    assert text.split(local_s3.BEGIN)[0] == committed.split(local_s3.BEGIN)[0]

    local_s3.PAGE.write(run(520), docs)
    text = written.read_text()
    assert "| 9 s, 520 MB |" in text and "500 MB" not in text
    assert local_s3.PAGE.stale(docs) == []
