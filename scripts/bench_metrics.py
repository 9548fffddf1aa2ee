"""What the operators' metrics cost a request's server time (`api.metrics`), in one
run, in alternating rounds: a poll (`changes` from the head: no changes) and a page
of 100, through the Lambda handler (Mangum, as `api.lambda_handler` serves it) with
EMF against metrics off, and through a server's app (Starlette's test client) with
Prometheus against off; and a Lambda's cold start (a fresh process importing
`api.lambda_handler` and answering one poll) with `METRICS=emf` against `off`.

Both sides write the request's line where production does: with metrics off the
Lambda's line goes through `logging` to a handler in the Lambda runtime's format,
with EMF the document goes to stdout; here both to /dev/null (a write each). A
server logs its line either way. The figures: the median over rounds of a call's
mean time in the round, by the clock and in this process's CPU (every thread: the
server's work, not DynamoDB Local's, which runs in its own process and which other
work on a shared machine disturbs far less), and their ratios to off's; cold starts
by the clock and in the child's CPU. On a shared machine
both swing by 10% and more from run to run (load averages of 15 on 2 cores), so
`--instructions` counts instead what a poll costs the Lambda's process in
instructions, which the load does not change: a child process serving K polls
through `api.lambda_handler` under cachegrind (valgrind), METRICS=emf and off, at
two K, the difference per poll. Run with
`scripts/bench-metrics [--rounds N] [--calls N] [--cold-rounds N] [--instructions]`.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
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
from scripts.benchmarks.harness import (
    CHANGES,
    PUSH,
    SECRET,
    local_engine_settings,
    realistic_person,
)

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
    args = parser.parse_args(argv)
    if args.instructions:
        return _instructions()
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
        calls = {name: _caller(name, make(), settings, token) for name, make in sinks.items()}
        head = _seed(calls["Lambda, off"])
        # As the Lambda handler and scripts/serve do once their app is built: startup's
        # heap (here four apps') left out of collections, which would otherwise walk it
        # whenever a side's allocations trigger a full one (commit 274c7c3).
        freeze_startup_heap()
        ops: dict[str, tuple[str, dict[str, Any]]] = {
            "poll": (CHANGES, {"t": TENANT, "s": head}),
            "page of 100": (CHANGES, {"t": TENANT, "l": 100}),
        }
        means: dict[tuple[str, str], list[float]] = {}
        cpu: dict[tuple[str, str], list[float]] = {}
        for round_ in range(args.rounds + 1):
            order = list(calls) if round_ % 2 else list(reversed(calls))
            for op, (query, variables) in ops.items():
                for name in order:
                    call = calls[name]
                    started, used = time.perf_counter(), time.process_time()
                    for _ in range(args.calls):
                        call(query, variables)
                    ms = (time.perf_counter() - started) * 1000 / args.calls
                    cpu_ms = (time.process_time() - used) * 1000 / args.calls
                    if round_ > 0:  # the first warms caches and DynamoDB Local's JIT
                        means.setdefault((op, name), []).append(ms)
                        cpu.setdefault((op, name), []).append(cpu_ms)
        cold = _cold_starts(settings, token, args.cold_rounds)
    print(
        f"\nmetrics on against off: a request's time, median of {args.rounds} rounds of "
        f"{args.calls} calls, alternating"
    )
    print(f"{'operation':<14}{'where':<22}{'ms':>8}{'/ off':>8}{'CPU ms':>8}{'/ off':>8}")
    result: dict[str, Any] = {}
    for (op, name), values in means.items():
        off = (op, name.split(",")[0] + ", off")
        ms, base = statistics.median(values), statistics.median(means[off])
        used, cpu_base = statistics.median(cpu[(op, name)]), statistics.median(cpu[off])
        result[f"{op} | {name}"] = {"ms": round(ms / base, 4), "cpu": round(used / cpu_base, 4)}
        print(f"{op:<14}{name:<22}{ms:>8.3f}{ms / base:>8.3f}{used:>8.3f}{used / cpu_base:>8.3f}")
    print(f"\ncold start (process start to exit, import and one poll), {args.cold_rounds} rounds")
    print(f"{'METRICS':<14}{'min ms':>8}{'median':>8}{'/ off':>8}{'CPU ms':>8}{'/ off':>8}")
    walls, cpus = cold
    for kind, values in walls.items():
        low, mid = min(values), statistics.median(values)
        used = min(cpus[kind])
        print(
            f"{kind:<14}{low:>8.0f}{mid:>8.0f}{mid / statistics.median(walls['off']):>8.3f}"
            f"{used:>8.0f}{used / min(cpus['off']):>8.3f}"
        )
    result["cold start emf / off"] = {
        "median ms": round(statistics.median(walls["emf"]) / statistics.median(walls["off"]), 4),
        "min CPU": round(min(cpus["emf"]) / min(cpus["off"]), 4),
    }
    print(json.dumps(result))
    return 0


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


# A child serving `argv[1]` polls through the Lambda handler (under cachegrind).
# The runtime's root handler writes what goes through `logging` (off's line, and
# Mangum's), as on Lambda.
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
FEW, MANY = 10, 60


def _instructions() -> int:
    """Instructions per poll of the Lambda's process, METRICS=emf against off."""
    import re

    token = make_local_token(SECRET, "bench", [TENANT], 3600)
    per_poll: dict[str, float] = {}
    with local_engine_settings() as settings:
        env = _lambda_env(settings, token)
        for kind in ("off", "emf"):
            counts = []
            for polls in (FEW, MANY):
                done = subprocess.run(
                    [
                        "valgrind",
                        "--tool=cachegrind",
                        "--cache-sim=no",
                        "--cachegrind-out-file=/dev/null",
                        sys.executable,
                        "-c",
                        POLLS,
                        str(polls),
                    ],
                    env={**env, "METRICS": kind},
                    cwd=PROJECT_ROOT,
                    capture_output=True,
                    text=True,
                    check=True,
                )
                found = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
                assert found, done.stderr[-2000:]
                counts.append(int(found[1].replace(",", "")))
            per_poll[kind] = (counts[1] - counts[0]) / (MANY - FEW)
    print(f"\na poll through the Lambda handler, instructions ({MANY} polls less {FEW})")
    for kind, count in per_poll.items():
        print(f"METRICS={kind:<6}{count:>14,.0f}{count / per_poll['off']:>8.4f}")
    print(json.dumps({"instructions per poll": per_poll}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
