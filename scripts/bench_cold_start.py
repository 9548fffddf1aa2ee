"""Each Lambda function's cold start as Lambda runs it: from the built bundle (this
machine's x86_64 twin of lambda.zip, built by scripts/package-lambda from the same
lock), by the runtime's own Python version (scripts/_setup's lambda_python), a
fresh interpreter per start that writes no bytecode (-B, PYTHONDONTWRITEBYTECODE;
the bundle is made read-only, as /var/task is), the bundle its working directory
and on its path. Each process runs one function's init (the handler module's
import, Lambda's init phase) and its first invocations (each an invoke phase),
timed from just before the process is made to the import's return and to each
invocation's return, as Lambda bills and a device waits for them; the interpreter's
exit, which Lambda never waits for, is not counted (its time is printed apart).
The functions: HTTP's import, then its first poll (a `changes` query, against
DynamoDB Local); the realtime function's import, `$connect`, then
`connection_init`; the fan-out's import and first stream batch (one head change of
a tenant nobody subscribes to: one Query); the drain's import and first message
(not a batch record: init and a refusal); the sweep's import and first round (no
tenant due). Against the stack's import floor (strawberry, pynamodb and boto3
imported and a DynamoDB client made) run the same way from the same bundle, to the
point its client is made.

Every function runs once a round, interleaved, for `--rounds` rounds after one that
is not counted (it warms the file cache); at each point the minimum (the run least
disturbed by other work on the machine), the median, and the minimum CPU time (user
and system, the process's own) of each.
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
import dataclasses
import datetime as dt
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
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
# What each child runs first: `_point()` writes the monotonic clock (the same clock
# as the parent's, system-wide) and the process's CPU time to the pipe the parent
# reads, at each point measured. `os` is imported by Python's own startup, `time`
# is built in: nothing here adds to an import.
_POINT = (
    "import os as _os, time as _time\n"
    "def _point(fd=int(_os.environ['COLD_START_FD'])):\n"
    "    _os.write(fd, b'%d %d\\n' % (_time.monotonic_ns(), _time.process_time_ns()))\n"
)


@dataclasses.dataclass(frozen=True)
class Function:
    """A Lambda function's init (the handler module's import, Lambda's init phase) and
    its first invocations, in order (each its own invoke phase)."""

    init: str
    invocations: tuple[tuple[str, str], ...] = ()

    def points(self, name: str) -> list[str]:
        """The points measured, each from the process's start: the import returned,
        then each invocation returned."""
        if not self.invocations:
            return [name]
        labels = [f"{name}: import"]
        for step, _ in self.invocations:
            labels.append(f"{labels[-1]} + {step}")
        return labels

    def code(self) -> str:
        steps = [self.init, *(code for _, code in self.invocations)]
        return _POINT + "".join(f"{step}\n_point()\n" for step in steps)


def _socket_message(variable: str) -> str:
    """A WebSocket route's event, on this start's own connection."""
    return (
        f"event = json.loads(os.environ['{variable}'])\n"
        "event['requestContext']['connectionId'] = connection\n"
        "answer = websocket_handler(event, context)\n"
        "assert answer['statusCode'] == 200, answer\n"
    )


FLOOR_KIND = "floor: strawberry, pynamodb, boto3 + client"
MEASURE = (
    "process start to the handler ready, then to each first invocation's return (exit not counted)"
)
# Each function's init and first invocations, as Lambda's bootstrap runs them.
FUNCTIONS = {
    "HTTP": Function(
        "from api.lambda_handler import handler",
        (
            (
                "first poll",
                "import json, os\n" + _CONTEXT + "answer = handler("
                "json.loads(os.environ['COLD_START_POLL']), context)\n"
                "assert answer['statusCode'] == 200, answer\n"
                "assert 'errors' not in json.loads(answer['body']), answer\n",
            ),
        ),
    ),
    # What a device waits for before it may subscribe: $connect checks the
    # subprotocol only; connection_init verifies the JWT, writes the connection's
    # item and posts connection_ack (to a stand-in of the Management API).
    "realtime": Function(
        "from api.realtime.aws import websocket_handler",
        (
            (
                "$connect",
                "import json, os\n"
                + _CONTEXT
                + "connection = os.urandom(8).hex()  # a new socket\n"
                + _socket_message("COLD_START_CONNECT"),
            ),
            ("connection_init", _socket_message("COLD_START_INIT")),
        ),
    ),
    "fanout": Function(
        "from api.realtime.aws import stream_handler",
        (
            (
                "first batch",
                "import json, os\n" + _CONTEXT + "answer = stream_handler("
                "json.loads(os.environ['COLD_START_STREAM']), context)\n"
                "assert answer == {'sent': 0}, answer\n",
            ),
        ),
    ),
    "drain": Function(
        "from api.realtime.aws import drain_handler",
        (
            (
                "first message",
                _CONTEXT + "answer = drain_handler("
                "{'Records': [{'messageId': 'm', 'body': '{}'}]}, context)\n"
                "assert answer == {'batchItemFailures': []}, answer\n",
            ),
        ),
    ),
    "sweep": Function(
        "from api.sweep_handler import handler",
        (("first round", _CONTEXT + "answer = handler({}, context)\n"),),
    ),
}
FLOOR_FUNCTION = Function(FLOOR)


@dataclasses.dataclass(frozen=True)
class Start:
    """One fresh interpreter's start, on the monotonic clock (ns): just before the
    process was made, each point it reported (with its CPU time, user and system,
    at each), and when its exit was seen, which Lambda never waits for: its time is
    printed, never counted."""

    started_ns: int
    points_ns: list[int]
    cpu_ns: list[int]
    exited_ns: int

    @property
    def points_ms(self) -> list[float]:
        """ms from the start to each point."""
        return [(at - self.started_ns) / 1e6 for at in self.points_ns]

    @property
    def cpu_ms(self) -> list[float]:
        return [cpu / 1e6 for cpu in self.cpu_ns]

    @property
    def exit_ms(self) -> float:
        """ms from the last point to the exit: not counted."""
        return (self.exited_ns - self.points_ns[-1]) / 1e6


def start(python: str, code: str, env: dict[str, str], cwd: Path) -> Start:
    """Runs `code` in a fresh `python -B`, timed from just before the process is
    made to each point it reports; its exit is waited for but not counted."""
    read, write = os.pipe()
    with tempfile.TemporaryFile() as errors:
        try:
            started = time.monotonic_ns()
            child = subprocess.Popen(
                [python, "-B", "-c", code],
                env={**env, "COLD_START_FD": str(write)},
                cwd=cwd,
                pass_fds=(write,),
                stdout=subprocess.DEVNULL,
                stderr=errors,
            )
        finally:
            os.close(write)
        with os.fdopen(read, "rb") as pipe:
            reported = pipe.read()  # until the child's exit closes its end
        child.wait()
        exited = time.monotonic_ns()
        if child.returncode != 0:
            errors.seek(0)
            raise RuntimeError(f"{code!r} failed:\n{errors.read().decode()[-3000:]}")
    points = [[int(v) for v in line.split()] for line in reported.splitlines()]
    return Start(started, [at for at, _ in points], [cpu for _, cpu in points], exited)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=11)
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
    functions = {FLOOR_KIND: FLOOR_FUNCTION, **FUNCTIONS}
    with (
        local_engine_settings() as settings,
        ManagementApi().running() as management,
        read_only(*bundles.values()),
    ):
        env = _environment(settings, management.url)
        starts: dict[tuple[str, str], list[Start]] = {
            (bundle, name): [] for bundle in bundles for name in functions
        }
        for round_ in range(args.rounds + 1):
            print(f"round {round_} of {args.rounds} (0: not counted)", file=sys.stderr)
            for (bundle, name), kept in starts.items():
                folder = bundles[bundle]
                run = start(
                    args.python, functions[name].code(), {**env, "PYTHONPATH": str(folder)}, folder
                )
                if round_ > 0:  # the first warms the file cache
                    kept.append(run)
        # Every connection_init was acknowledged: none was refused and hung up.
        acks = [m for _, m in management.posts if m == {"type": "connection_ack"}]
        assert len(acks) == len(bundles) * (args.rounds + 1), management.posts[-3:]
        assert not management.deleted, management.deleted
        for folder in bundles.values():  # nothing wrote bytecode where none was shipped
            written = next(folder.rglob("__pycache__"), None)
            assert folder == args.shipped or written is None, written
    saved = result(args, version, list(bundles), starts, load_at_start)
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
    starts: dict[tuple[str, str], list[Start]],
    load_at_start: float,
) -> dict[str, Any]:
    """The run as it is saved, printed and rendered: when, where, by which command and
    commit; each bundle's points, the floor first, each with its minimum time from
    the process's start over the rounds, median and minimum CPU time (ms), and the
    step alone (the import, or the invocation since the point before); each
    function's exit after its last point (median ms, not counted)."""
    before = f"--before {args.before_name}" if args.before else "--before none"
    functions = {FLOOR_KIND: FLOOR_FUNCTION, **FUNCTIONS}
    figures: dict[str, dict[str, dict[str, float]]] = {}
    exits: dict[str, dict[str, float]] = {}
    for bundle in bundles:
        figures[bundle], exits[bundle] = {}, {}
        for name, function in functions.items():
            runs = starts[bundle, name]
            for i, point in enumerate(function.points(name)):
                at = [r.points_ms[i] for r in runs]
                step = [r.points_ms[i] - (r.points_ms[i - 1] if i else 0.0) for r in runs]
                figures[bundle][point] = {
                    "min_ms": min(at),
                    "median_ms": statistics.median(at),
                    "min_cpu_ms": min(r.cpu_ms[i] for r in runs),
                    "step_min_ms": min(step),
                    "step_median_ms": statistics.median(step),
                }
            short = "floor" if name == FLOOR_KIND else name
            exits[bundle][short] = statistics.median(r.exit_ms for r in runs)
    return {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": f"scripts/bench-cold-start --rounds {args.rounds} {before}",
        **commit(),
        "machine": this_machine(load_at_start),
        "python": version,
        "rounds": args.rounds,
        "floor": FLOOR_KIND,
        "measure": MEASURE,
        "bundles": figures,
        "exit_ms": exits,
    }


def report(saved: dict[str, Any]) -> None:
    """Prints a run's tables from its saved JSON alone."""
    bundles, floor = saved["bundles"], saved["floor"]
    print(
        f"\ncold start from the bundle, Python {saved['python']}, {saved['measure']}, "
        f"{saved['rounds']} interleaved rounds; / floor: the same bundle's floor"
    )
    header = f"{'':<52}{'min ms':>8}{'/ floor':>9}{'median':>8}{'/ floor':>9}"
    header += f"{'CPU ms':>8}{'/ floor':>9}{'step min':>10}{'median':>8}"
    for bundle, kinds in bundles.items():
        print(f"\n{bundle}\n{header}")
        base = kinds[floor]
        for kind, f in kinds.items():
            low, mid, used = f["min_ms"], f["median_ms"], f["min_cpu_ms"]
            print(
                f"{kind:<52}{low:>8.0f}{low / base['min_ms']:>9.2f}"
                f"{mid:>8.0f}{mid / base['median_ms']:>9.2f}"
                f"{used:>8.0f}{used / base['min_cpu_ms']:>9.2f}"
                f"{f['step_min_ms']:>10.0f}{f['step_median_ms']:>8.0f}"
            )
        exits = ", ".join(f"{n} {ms:.0f}" for n, ms in saved["exit_ms"][bundle].items())
        print(f"exit after the last point, not counted (median ms): {exits}")
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


if __name__ == "__main__":
    sys.exit(main())
