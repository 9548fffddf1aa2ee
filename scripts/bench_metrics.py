"""What the operators' metrics cost a request's server time (`api.metrics`), in one
run, in alternating rounds: a poll (`changes` from the head: no changes) and a page
of 100, through the Lambda handler (Mangum, as `api.lambda_handler` serves it) with
EMF against metrics off, and through a server's app (Starlette's test client) with
Prometheus against off; and a Lambda's cold start (a fresh process importing
`api.lambda_handler` and answering one poll) with `METRICS=emf` against `off`.

Both sides write the request's line where production does: with metrics off the
Lambda's line goes through `logging` to a handler in the Lambda runtime's format,
with EMF the document goes to stdout; here both to /dev/null (a write each). A
server logs its line either way. Every call of a round is made by each side in
turn, the order alternating call by call. The figures: a call's mean time in each
round, by the clock and in this process's CPU (every thread: the server's work, not
DynamoDB Local's, which runs in its own process), their medians over rounds, and the
median of the rounds' ratios to off's; and the sink's own cost measured where it is
spent: the CPU time of the thread running `Metrics.request` (the request's line and
metrics), its median, and how much more than off's it is as a share of off's
request CPU. Cold starts by the clock and in the child's CPU. On a shared machine
the clock swings by 15% between two sides that are the same (an A/A run, both
Lambda sides off, 8 rounds, load average 8: a poll 0.85x, a page 1.04x) and CPU by
2-3% (1.00x, 1.03x), so
`--instructions` counts instead what a poll and a page of 100 cost the Lambda's
process in instructions, which the load does not change: a child process serving K
requests through `api.lambda_handler` under cachegrind (valgrind), METRICS=emf and
off, at two K, the difference per request; and a cold start's, a child importing
the handler and serving one poll. Run with
`scripts/bench-metrics [--rounds N] [--calls N] [--cold-rounds N] [--instructions]`:
it prints its tables, saves the run as JSON in `.bench-results/` (`--out DIR`
elsewhere) and writes docs/operations.md's figures of the metrics' cost from it
(scripts/benchmarks/metrics_cost.py; `--page DIR` elsewhere). The two modes are
separate runs, kept as two parts of one JSON: each replaces its own.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from mangum import Mangum
from starlette.testclient import TestClient

from api import metrics
from api.app import create_app, freeze_startup_heap
from api.auth import make_local_token
from api.prometheus_metrics import Prometheus
from api.settings import PROJECT_ROOT
from api.worker_threads import persistent_pool
from scripts.benchmarks import metrics_cost
from scripts.benchmarks.harness import (
    CHANGES,
    PUSH,
    SECRET,
    local_engine_settings,
    realistic_person,
)
from scripts.benchmarks.page import commit, machine

EVENT = PROJECT_ROOT / "tests" / "deploy" / "events" / "query.json"
TENANT = "metrics"
COLD = (
    "import json, os, types\n"
    "from api.lambda_handler import handler\n"
    "event = json.loads(os.environ['COLD_START_EVENT'])\n"
    "answer = handler(event, types.SimpleNamespace(aws_request_id='cold', function_name='api'))\n"
    "assert answer['statusCode'] == 200 and 'errors' not in json.loads(answer['body']), answer\n"
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--cold-rounds", type=int, default=7)
    parser.add_argument(
        "--instructions", action="store_true", help="a poll's instructions, EMF and off"
    )
    metrics_cost.PAGE.options(parser)
    args = parser.parse_args(argv)
    if args.instructions:
        return _instructions(args.out, args.page)
    load_at_start = os.getloadavg()[0]  # the page states it: other work inflates times
    devnull = open(os.devnull, "w")  # noqa: SIM115 - for the whole run
    runtime = logging.StreamHandler(devnull)
    runtime.setFormatter(logging.Formatter("[%(levelname)s]\t%(asctime)s\t%(message)s"))
    logging.getLogger().addHandler(runtime)
    logging.getLogger().setLevel(logging.INFO)
    token = make_local_token(SECRET, "bench", [TENANT], 3600)
    with local_engine_settings() as settings:
        sinks: dict[str, Callable[[], metrics.Metrics]] = {
            "Lambda, EMF": lambda: metrics.Emf(devnull),
            "Lambda, off": metrics.Metrics,
            "server, Prometheus": Prometheus,
            "server, off": metrics.Metrics,
        }
        sinks_made = {name: _Timed(make()) for name, make in sinks.items()}
        calls = {name: _caller(name, sink, settings, token) for name, sink in sinks_made.items()}
        head = _seed(calls["Lambda, off"])
        # As the Lambda handler and scripts/serve do once their app is built: startup's
        # heap (here four apps') left out of collections, which would otherwise walk it
        # whenever a side's allocations trigger a full one (commit 274c7c3).
        freeze_startup_heap()
        ops: dict[str, tuple[str, dict[str, Any]]] = {
            "poll": (CHANGES, {"t": TENANT, "s": head}),
            "page of 100": (CHANGES, {"t": TENANT, "l": 100}),
        }
        # Each call of a round is made by every side in turn (the order alternating
        # call by call), so a burst of other work on the machine lands on all sides
        # alike; a round's ratio is on's time over off's in that round, and the
        # figure is the median of the rounds' ratios.
        ms: dict[tuple[str, str], list[float]] = {}
        cpu: dict[tuple[str, str], list[float]] = {}
        for round_ in range(args.rounds + 1):
            for op, (query, variables) in ops.items():
                _Timed.op = op if round_ > 0 else ""
                wall = dict.fromkeys(calls, 0.0)
                used = dict.fromkeys(calls, 0.0)
                for i in range(args.calls):
                    for name in list(calls) if (round_ + i) % 2 else list(reversed(calls)):
                        started, cpu_started = time.perf_counter(), time.process_time()
                        calls[name](query, variables)
                        wall[name] += time.perf_counter() - started
                        used[name] += time.process_time() - cpu_started
                if round_ > 0:  # the first warms caches and DynamoDB Local's JIT
                    for name in calls:
                        ms.setdefault((op, name), []).append(wall[name] * 1000 / args.calls)
                        cpu.setdefault((op, name), []).append(used[name] * 1000 / args.calls)
        own = {name: sink.own_us() for name, sink in sinks_made.items()}
        cold = _cold_starts(settings, token, args.cold_rounds)
    saved = result(args, ms, cpu, own, cold, load_at_start)
    report(saved)
    metrics_cost.PAGE.keep(saved, args.out, args.page)
    return 0


def result(
    args: argparse.Namespace,
    ms: dict[tuple[str, str], list[float]],
    cpu: dict[tuple[str, str], list[float]],
    own: dict[str, dict[str, float]],
    cold: tuple[dict[str, list[float]], dict[str, list[float]]],
    load_at_start: float,
) -> dict[str, Any]:
    """The run's figures as they are saved, printed and rendered: each side's request
    (medians over rounds; / off: the median of the rounds' ratios) and the cold starts."""
    rows = []
    for (op, name), values in ms.items():
        off_name = name.split(",")[0] + ", off"
        off = (op, off_name)
        rows.append(
            {
                "operation": op,
                "where": name,
                "ms": statistics.median(values),
                "ms_ratio": statistics.median(a / b for a, b in zip(values, ms[off], strict=True)),
                "cpu_ms": statistics.median(cpu[(op, name)]),
                "cpu_ratio": statistics.median(
                    a / b for a, b in zip(cpu[(op, name)], cpu[off], strict=True)
                ),
                "sink_us": own[name][op],
                "sink_share": (own[name][op] - own[off_name][op])
                / 1000
                / statistics.median(cpu[off]),
            }
        )
    walls, cpus = cold
    return {
        "part": "requests",
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": f"scripts/bench-metrics --rounds {args.rounds} --calls {args.calls} "
        f"--cold-rounds {args.cold_rounds}",
        **commit(),
        "machine": machine(load_at_start),
        "rounds": args.rounds,
        "calls": args.calls,
        "cold_rounds": args.cold_rounds,
        "rows": rows,
        "cold_start": {
            kind: {
                "min_ms": min(values),
                "median_ms": statistics.median(values),
                "min_cpu_ms": min(cpus[kind]),
                "median_cpu_ms": statistics.median(cpus[kind]),
            }
            for kind, values in walls.items()
        },
    }


def report(saved: dict[str, Any]) -> None:
    """Prints a run's tables (either part's) from its saved JSON alone."""
    if saved["part"] == "instructions":
        _report_instructions(saved)
        return
    print(
        f"\nmetrics on against off: a request's time, {saved['rounds']} rounds of "
        f"{saved['calls']} calls, the sides alternating call by call; ms and CPU ms: medians "
        "of the rounds' means; / off: the median of the rounds' ratios; sink us: the "
        "request's line and metrics (`Metrics.request`), median CPU of the thread, and its "
        "share beyond off's of off's CPU"
    )
    print(
        f"{'operation':<14}{'where':<22}{'ms':>8}{'/ off':>8}{'CPU ms':>8}{'/ off':>8}"
        f"{'sink us':>9}{'share':>8}"
    )
    for r in saved["rows"]:
        print(
            f"{r['operation']:<14}{r['where']:<22}{r['ms']:>8.3f}{r['ms_ratio']:>8.3f}"
            f"{r['cpu_ms']:>8.3f}{r['cpu_ratio']:>8.3f}{r['sink_us']:>9.1f}{r['sink_share']:>8.1%}"
        )
    print(
        f"\ncold start (process start to exit, import and one poll), {saved['cold_rounds']} rounds"
    )
    print(
        f"{'METRICS':<14}{'min ms':>8}{'median':>8}{'/ off':>8}"
        f"{'CPU min':>8}{'/ off':>8}{'median':>8}{'/ off':>8}"
    )
    cold = saved["cold_start"]
    off = cold["off"]
    for kind, c in cold.items():
        print(
            f"{kind:<14}{c['min_ms']:>8.0f}{c['median_ms']:>8.0f}"
            f"{c['median_ms'] / off['median_ms']:>8.3f}"
            f"{c['min_cpu_ms']:>8.0f}{c['min_cpu_ms'] / off['min_cpu_ms']:>8.3f}"
            f"{c['median_cpu_ms']:>8.0f}{c['median_cpu_ms'] / off['median_cpu_ms']:>8.3f}"
        )


class _Timed(metrics.Metrics):
    """A sink that measures its `request` (the line and the metrics): the CPU time of
    the thread that runs it, by operation (the one running: `_Timed.op`)."""

    op = ""

    def __init__(self, sink: metrics.Metrics) -> None:
        self.sink = sink
        self.spent: dict[str, list[int]] = {}

    def request(self, log: Any, status: int, duration_ms: float) -> None:
        started = time.thread_time_ns()
        self.sink.request(log, status, duration_ms)
        self.spent.setdefault(_Timed.op, []).append(time.thread_time_ns() - started)

    def add(self, metric: metrics.Metric, value: float = 1.0, **labels: str) -> None:
        self.sink.add(metric, value, **labels)

    def gauge(self, metric: metrics.Metric, read: Callable[[], float]) -> None:
        self.sink.gauge(metric, read)

    def own_us(self) -> dict[str, float]:
        return {op: statistics.median(ns) / 1000 for op, ns in self.spent.items() if op}


def _caller(
    name: str, sink: metrics.Metrics, settings: Any, token: str
) -> Callable[[str, dict[str, Any]], dict[str, Any]]:
    if name.startswith("Lambda"):
        app = create_app(settings, sockets=False, run_blocking=persistent_pool(), sink=sink)
        handler = Mangum(app, lifespan="off")
        template = json.loads(EVENT.read_text())
        template["headers"]["authorization"] = f"Bearer {token}"
        context = SimpleNamespace(aws_request_id="bench", function_name="api")

        def lambda_call(query: str, variables: dict[str, Any]) -> dict[str, Any]:
            event = {**template, "body": json.dumps({"query": query, "variables": variables})}
            body: dict[str, Any] = json.loads(handler(event, context)["body"])
            assert "errors" not in body, body
            return body["data"]

        return lambda_call
    client = TestClient(create_app(settings, sockets=False, sink=sink))
    headers = {"authorization": f"Bearer {token}"}

    def server_call(query: str, variables: dict[str, Any]) -> dict[str, Any]:
        body: dict[str, Any] = client.post(
            "/graphql", json={"query": query, "variables": variables}, headers=headers
        ).json()
        assert "errors" not in body, body
        return body["data"]

    return server_call


def _seed(call: Callable[[str, dict[str, Any]], dict[str, Any]]) -> str:
    """100 people in the tenant; the head's token."""
    import random

    person = realistic_person(random.Random(5), 0)
    entries = [{"createPerson": {"tenantID": TENANT, "person": person}}] * 100
    data = call(PUSH, {"i": {"tenantID": TENANT, "mutations": entries}})
    return str(data["pushChanges"]["results"][-1]["item"]["changeToken"])


def _lambda_env(settings: Any, token: str) -> dict[str, str]:
    """A Lambda's environment against the bench's engine, with a poll as its event."""
    event = EVENT.read_text().replace("{{tenant}}", TENANT).replace("{{token}}", token)
    return {
        **{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
        "DYNAMODB_ENDPOINT": settings.dynamodb_endpoint or "",
        "TABLE_NAME": settings.table_name,
        "SYNC_AUTH_SECRET": SECRET,
        "AWS_ACCESS_KEY_ID": "local",
        "AWS_SECRET_ACCESS_KEY": "local",
        "AWS_DEFAULT_REGION": "us-east-1",
        "COLD_START_EVENT": event,
        "GRAPHIQL": "false",
        "INTROSPECTION": "false",
    }


def _cold_starts(
    settings: Any, token: str, rounds: int
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Each kind's times to exit, and CPU times (user and system), in ms."""
    env = _lambda_env(settings, token)
    times: dict[str, list[float]] = {"emf": [], "off": []}
    cpu: dict[str, list[float]] = {"emf": [], "off": []}
    for round_ in range(rounds + 1):
        for kind in ("emf", "off") if round_ % 2 else ("off", "emf"):
            children = resource.getrusage(resource.RUSAGE_CHILDREN)
            used = children.ru_utime + children.ru_stime
            started = time.perf_counter()
            subprocess.run(
                [sys.executable, "-c", COLD],
                env={**env, "METRICS": kind},
                cwd=PROJECT_ROOT,
                check=True,
                stdout=subprocess.DEVNULL,
            )
            if round_ > 0:  # the first writes the bytecode still missing
                times[kind].append((time.perf_counter() - started) * 1000)
                children = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu[kind].append((children.ru_utime + children.ru_stime - used) * 1000)
    return times, cpu


# A child serving `argv[1]` requests (its event's) through the Lambda handler (under
# cachegrind). The runtime's root handler writes what goes through `logging` (off's
# line, and Mangum's), as on Lambda.
POLLS = (
    "import json, logging, os, sys, types\n"
    "from api.lambda_handler import handler\n"
    "runtime = logging.StreamHandler(sys.stdout)\n"
    "runtime.setFormatter(logging.Formatter('[%(levelname)s]\\t%(asctime)s\\t%(message)s'))\n"
    "logging.getLogger().addHandler(runtime)\n"
    "event = json.loads(os.environ['COLD_START_EVENT'])\n"
    "context = types.SimpleNamespace(aws_request_id='cg', function_name='api')\n"
    "for _ in range(int(sys.argv[1])):\n"
    "    answer = handler(event, context)\n"
    "    assert answer['statusCode'] == 200 and 'errors' not in json.loads(answer['body'])\n"
)
# Requests served by the two children of each kind: the difference, per request, is
# a request's instructions without the process's start.
FEW_MANY = {"poll": (10, 60), "page of 100": (5, 25)}


def _instructions(out: Path, page: Path) -> int:
    """Instructions per request (a poll, a page of 100) of the Lambda's process,
    METRICS=emf against off, and a cold start's (the whole child: import and one poll)."""
    load_at_start = os.getloadavg()[0]  # stated with the counts, which it does not change
    token = make_local_token(SECRET, "bench", [TENANT], 3600)
    per_request: dict[str, dict[str, float]] = {}
    with local_engine_settings() as settings:
        head = _seed(_caller("Lambda, off", metrics.Metrics(), settings, token))
        env = _lambda_env(settings, token)
        template = json.loads(env["COLD_START_EVENT"])
        bodies = {
            "poll": {"query": CHANGES, "variables": {"t": TENANT, "s": head}},
            "page of 100": {"query": CHANGES, "variables": {"t": TENANT, "l": 100}},
        }
        for op, body in bodies.items():
            event = json.dumps({**template, "body": json.dumps(body)})
            few, many = FEW_MANY[op]
            for kind in ("off", "emf"):
                counts = [_counted(env, kind, event, requests) for requests in (few, many)]
                per_request.setdefault(op, {})[kind] = (counts[1] - counts[0]) / (many - few)
        # A cold start: the whole child, its import and one poll (the bytecode the
        # development environment has, written by the runs above).
        poll = json.dumps({**template, "body": json.dumps(bodies["poll"])})
        cold = {kind: float(_counted(env, kind, poll, 1)) for kind in ("off", "emf")}
    saved = instructions_result(per_request, cold, load_at_start)
    report(saved)
    metrics_cost.PAGE.keep(saved, out, page)
    return 0


def instructions_result(
    per_request: dict[str, dict[str, float]], cold: dict[str, float], load_at_start: float
) -> dict[str, Any]:
    """The counts as they are saved, printed and rendered (the load is stated, though
    it does not change them)."""
    return {
        "part": "instructions",
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": "scripts/bench-metrics --instructions",
        **commit(),
        "machine": machine(load_at_start),
        "requests": {op: {"few": few, "many": many} for op, (few, many) in FEW_MANY.items()},
        "per_request": per_request,
        "cold_start": cold,
    }


def _report_instructions(saved: dict[str, Any]) -> None:
    print("\na request through the Lambda handler, instructions (a child serving many less few)")
    for op, kinds in saved["per_request"].items():
        for kind, count in kinds.items():
            print(f"{op:<14}METRICS={kind:<6}{count:>14,.0f}{count / kinds['off']:>8.4f}")
    print("\na cold start, instructions (a child importing the handler and serving one poll)")
    cold = saved["cold_start"]
    for kind, count in cold.items():
        print(f"{'cold start':<14}METRICS={kind:<6}{count:>14,.0f}{count / cold['off']:>8.4f}")


def _counted(env: dict[str, str], kind: str, event: str, requests: int) -> int:
    """The instructions of a child serving `requests` requests of `event` (cachegrind)."""
    import re

    done = subprocess.run(
        [
            "valgrind",
            "--tool=cachegrind",
            "--cache-sim=no",
            "--cachegrind-out-file=/dev/null",
            sys.executable,
            "-c",
            POLLS,
            str(requests),
        ],
        # One hash seed for both kinds: sets' and dicts' layouts alike.
        env={**env, "METRICS": kind, "COLD_START_EVENT": event, "PYTHONHASHSEED": "0"},
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    found = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
    assert found, done.stderr[-2000:]
    return int(found[1].replace(",", ""))


if __name__ == "__main__":
    sys.exit(main())
