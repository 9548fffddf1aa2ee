"""Each Lambda function's cold start as Lambda runs it: from the built bundle (this
machine's x86_64 twin of lambda.zip, built by scripts/package-lambda from the same
lock), by the runtime's own Python version (scripts/_setup's lambda_python), a
fresh interpreter per start that writes no bytecode (-B, PYTHONDONTWRITEBYTECODE;
the bundle is made read-only, as /var/task is), the bundle its working directory
and on its path. Each process runs one function's init and its first invocation:
the HTTP function's import, and its import and first poll (a `changes` query,
against DynamoDB Local); the realtime function's `$connect`; the fan-out's first
stream batch (one head change of a tenant nobody subscribes to: one Query); the
drain's first message (not a batch record: init and a refusal); the sweep's first
round (no tenant due). Against the stack's import floor (strawberry, pynamodb and
boto3 imported and a DynamoDB client made) run the same way from the same bundle.

Every kind runs once a round, interleaved, for `--rounds` rounds after one that is
not counted (it warms the file cache); the minimum (the run least disturbed by other
work on the machine), the median, and the minimum CPU time (user and system) of each.
Bundles: `shipped` (with the bytecode it ships), `shipped, no bytecode` (the same
files without it: what Lambda compiles on each cold start otherwise) and, when
given, an earlier commit's bundle built by the same script.

Run with `scripts/bench-cold-start [--rounds N]`, which builds the bundles first. It
prints its tables, saves them as JSON in `.bench-results/` (`--out DIR` elsewhere) and
writes docs/cold-start.md's generated section and its plot from that JSON
(scripts/benchmarks/cold_start.py; `--page DIR` elsewhere).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from api.auth import make_local_token
from api.settings import PROJECT_ROOT
from api.storage import keys
from scripts.benchmarks import cold_start
from scripts.benchmarks.harness import SECRET, local_engine_settings
from scripts.benchmarks.page import commit
from scripts.benchmarks.page import machine as this_machine
from tests.support.management_api import ManagementApi

EVENTS = PROJECT_ROOT / "tests" / "deploy" / "events"
_CLIENT = "boto3.client('dynamodb', region_name='us-east-1', endpoint_url=os.environ['DYNAMODB_ENDPOINT'])"  # noqa: E501
FLOOR = f"import os, strawberry, pynamodb.models, boto3; {_CLIENT}"
_CONTEXT = (
    "import types\n"
    "context = types.SimpleNamespace(aws_request_id='cold', function_name='cold',"
    " get_remaining_time_in_millis=lambda: 300_000)\n"
)
# Each function's init and first invocation, as Lambda's bootstrap runs them.
FUNCTIONS = {
    "HTTP: import": "import api.lambda_handler",
    "HTTP: import + first poll": (
        "import json, os\n" + _CONTEXT + "from api.lambda_handler import handler\n"
        "answer = handler(json.loads(os.environ['COLD_START_POLL']), context)\n"
        "assert answer['statusCode'] == 200, answer\n"
        "assert 'errors' not in json.loads(answer['body']), answer\n"
    ),
    "realtime: $connect": (
        "import json, os\n" + _CONTEXT + "from api.realtime.aws import websocket_handler\n"
        "answer = websocket_handler(json.loads(os.environ['COLD_START_CONNECT']), context)\n"
        "assert answer['statusCode'] == 200, answer\n"
    ),
    # What a device waits for before it may subscribe: $connect checks the
    # subprotocol only; connection_init verifies the JWT, writes the connection's
    # item and posts connection_ack (to a stand-in of the Management API).
    "realtime: $connect + connection_init": (
        "import json, os\n" + _CONTEXT + "from api.realtime.aws import websocket_handler\n"
        "connection = os.urandom(8).hex()  # a new socket each start\n"
        "for name in ('COLD_START_CONNECT', 'COLD_START_INIT'):\n"
        "    event = json.loads(os.environ[name])\n"
        "    event['requestContext']['connectionId'] = connection\n"
        "    answer = websocket_handler(event, context)\n"
        "    assert answer['statusCode'] == 200, answer\n"
    ),
    "fanout: first batch": (
        "import json, os\n" + _CONTEXT + "from api.realtime.aws import stream_handler\n"
        "answer = stream_handler(json.loads(os.environ['COLD_START_STREAM']), context)\n"
        "assert answer == {'sent': 0}, answer\n"
    ),
    "drain: first message": (
        _CONTEXT + "from api.realtime.aws import drain_handler\n"
        "answer = drain_handler({'Records': [{'messageId': 'm', 'body': '{}'}]}, context)\n"
        "assert answer == {'batchItemFailures': []}, answer\n"
    ),
    "sweep: first round": (
        _CONTEXT + "from api.sweep_handler import handler\nanswer = handler({}, context)\n"
    ),
}
FLOOR_KIND = "floor: strawberry, pynamodb, boto3 + client"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--python", required=True, help="the runtime's interpreter")
    parser.add_argument("--shipped", type=Path, required=True, help="the bundle, unpacked")
    parser.add_argument("--before", type=Path, help="an earlier commit's bundle, unpacked")
    parser.add_argument("--before-name", default="before")
    cold_start.PAGE.options(parser)
    args = parser.parse_args(argv)
    load_at_start = os.getloadavg()[0]  # the page states it: other work inflates times
    version = subprocess.run(
        [args.python, "-c", "import sys; print(sys.version.split()[0])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    bare = args.shipped.with_name(args.shipped.name + "-no-bytecode")
    shutil.rmtree(bare, ignore_errors=True)
    shutil.copytree(args.shipped, bare, ignore=shutil.ignore_patterns("__pycache__"))
    bundles = {"shipped": args.shipped, "shipped, no bytecode": bare}
    if args.before:
        bundles[f"{args.before_name} (shipped no bytecode)"] = args.before
    # (bundle, kind) -> code; each bundle's own floor.
    runs = {
        (bundle, kind): code
        for bundle in bundles
        for kind, code in {FLOOR_KIND: FLOOR, **FUNCTIONS}.items()
    }
    with (
        local_engine_settings() as settings,
        ManagementApi().running() as management,
        read_only(*bundles.values()),
    ):
        env = _environment(settings, management.url)
        times: dict[tuple[str, str], list[float]] = {run: [] for run in runs}
        cpu: dict[tuple[str, str], list[float]] = {run: [] for run in runs}
        for round_ in range(args.rounds + 1):
            print(f"round {round_} of {args.rounds} (0: not counted)", file=sys.stderr)
            for (bundle, kind), code in runs.items():
                folder = bundles[bundle]
                used = _children_cpu_s()
                started = time.perf_counter()
                subprocess.run(
                    [args.python, "-B", "-c", code],
                    env={**env, "PYTHONPATH": str(folder)},
                    cwd=folder,
                    check=True,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                if round_ > 0:  # the first warms the file cache
                    times[bundle, kind].append((time.perf_counter() - started) * 1000)
                    cpu[bundle, kind].append((_children_cpu_s() - used) * 1000)
        # Every connection_init was acknowledged: none was refused and hung up.
        acks = [m for _, m in management.posts if m == {"type": "connection_ack"}]
        assert len(acks) == len(bundles) * (args.rounds + 1), management.posts[-3:]
        assert not management.deleted, management.deleted
        for folder in bundles.values():  # nothing wrote bytecode where none was shipped
            written = next(folder.rglob("__pycache__"), None)
            assert folder == args.shipped or written is None, written
    saved = result(args, version, list(bundles), times, cpu, load_at_start)
    report(saved)
    cold_start.PAGE.keep(saved, args.out, args.page)
    return 0


def _environment(settings: object, management_url: str) -> dict[str, str]:
    token = make_local_token(SECRET, "cold", ["cold"], 3600)
    poll = (EVENTS / "query.json").read_text().replace("{{tenant}}", "cold")
    connect = (EVENTS / "ws_connect.json").read_text().replace("{{connectionId}}", "cold=")
    init = {"type": "connection_init", "payload": {"Authorization": f"Bearer {token}"}}
    message = json.loads((EVENTS / "ws_message.json").read_text())
    message["requestContext"]["connectionId"] = "cold="
    message["body"] = json.dumps(init)
    head = {
        "eventName": "MODIFY",
        "dynamodb": {
            "Keys": {"pk": {"S": keys.log_pk("cold")}, "sk": {"S": keys.HEAD_SK}},
            "NewImage": {"tok": {"S": "0" * 26}},
        },
    }
    keep = ("PATH", "HOME", "LANG", "TMPDIR")
    return {
        **{k: v for k, v in os.environ.items() if k in keep},
        "PYTHONDONTWRITEBYTECODE": "1",
        "DYNAMODB_ENDPOINT": getattr(settings, "dynamodb_endpoint", None) or "",
        "TABLE_NAME": getattr(settings, "table_name", ""),
        "SYNC_AUTH_SECRET": SECRET,
        "CURSOR_SECRET": "cold-start-cursor-secret-of-enough-length",
        "AWS_ACCESS_KEY_ID": "local",
        "AWS_SECRET_ACCESS_KEY": "local",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_REGION": "us-east-1",
        "WEBSOCKET_MANAGEMENT_URL": management_url,
        "BLOB_BUCKET": "cold-start",
        "GRAPHIQL": "false",
        "INTROSPECTION": "false",
        "COLD_START_POLL": poll.replace("{{token}}", token),
        "COLD_START_CONNECT": connect,
        "COLD_START_INIT": json.dumps(message),
        "COLD_START_STREAM": json.dumps({"Records": [head]}),
    }


@contextlib.contextmanager
def read_only(*folders: Path) -> Iterator[None]:
    """No write bit anywhere in the bundles while they run, as in /var/task (root
    ignores the bits: -B and PYTHONDONTWRITEBYTECODE keep the bytecode unwritten,
    and the run checks that none was)."""
    for folder in folders:
        subprocess.run(["chmod", "-R", "a-w", str(folder)], check=True)
    try:
        yield
    finally:
        for folder in folders:
            subprocess.run(["chmod", "-R", "u+w", str(folder)], check=True)


def result(
    args: argparse.Namespace,
    version: str,
    bundles: list[str],
    times: dict[tuple[str, str], list[float]],
    cpu: dict[tuple[str, str], list[float]],
    load_at_start: float,
) -> dict[str, Any]:
    """The run as it is saved, printed and rendered: when, where, by which command and
    commit; each bundle's kinds, the floor first, each with its minimum time of the
    rounds, median and minimum CPU time (ms)."""
    before = f"--before {args.before_name}" if args.before else "--before none"
    return {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": f"scripts/bench-cold-start --rounds {args.rounds} {before}",
        **commit(),
        "machine": this_machine(load_at_start),
        "python": version,
        "rounds": args.rounds,
        "floor": FLOOR_KIND,
        "bundles": {
            bundle: {
                kind: {
                    "min_ms": min(times[bundle, kind]),
                    "median_ms": statistics.median(times[bundle, kind]),
                    "min_cpu_ms": min(cpu[bundle, kind]),
                }
                for kind in (FLOOR_KIND, *FUNCTIONS)
            }
            for bundle in bundles
        },
    }


def report(saved: dict[str, Any]) -> None:
    """Prints a run's tables from its saved JSON alone."""
    bundles, floor = saved["bundles"], saved["floor"]
    print(
        f"\ncold start from the bundle, Python {saved['python']}, process start to exit, "
        f"{saved['rounds']} interleaved rounds; / floor: the same bundle's floor"
    )
    header = f"{'':<52}{'min ms':>8}{'/ floor':>9}{'median':>8}{'/ floor':>9}"
    header += f"{'CPU ms':>8}{'/ floor':>9}"
    for bundle, kinds in bundles.items():
        print(f"\n{bundle}\n{header}")
        for kind, f in kinds.items():
            low, mid, used = f["min_ms"], f["median_ms"], f["min_cpu_ms"]
            print(
                f"{kind:<52}{low:>8.0f}{low / kinds[floor]['min_ms']:>9.2f}"
                f"{mid:>8.0f}{mid / kinds[floor]['median_ms']:>9.2f}"
                f"{used:>8.0f}{used / kinds[floor]['min_cpu_ms']:>9.2f}"
            )
    shipped = bundles["shipped"]
    others = [b for b in bundles if b != "shipped"]
    print(f"\neach bundle's cold start / the shipped one's (min time; median)\n{'':<52}", end="")
    print("".join(f"{b.split(' (')[0]:>24}" for b in others))
    for kind in shipped:
        if kind == floor:
            continue
        cells = [
            f"{bundles[b][kind]['min_ms'] / shipped[kind]['min_ms']:>14.2f}; "
            f"{bundles[b][kind]['median_ms'] / shipped[kind]['median_ms']:>7.2f}"
            for b in others
        ]
        print(f"{kind:<52}{''.join(cells)}")


def _children_cpu_s() -> float:
    """CPU seconds (user and system) of the children that have exited so far."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


if __name__ == "__main__":
    sys.exit(main())
