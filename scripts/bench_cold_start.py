"""A Lambda's cold start, measured here: fresh Python processes that import
`api.lambda_handler`, and that import it and answer one HTTP API request (a
`changes` query) against DynamoDB Local, against two floors run in the same
rounds, interleaved: importing boto3 and creating a DynamoDB client; and the
stack's floor, importing strawberry, pynamodb and boto3 and creating that client
(what this stack cannot avoid). Process start to exit; the minimum of the rounds
(the least disturbed by other work on the machine) and their median; and the
minimum of each process's CPU time (user and system), which other work on a
shared machine inflates far less than it does the time to exit.

Every process runs from bytecode, as the floor's installed packages do: the
children may write it (PYTHONDONTWRITEBYTECODE is dropped), and a first round,
not counted, writes what is missing. Otherwise the project's own modules alone
would be compiled from source in every round.

Run with `scripts/bench-cold-start [--rounds N]`; `python -X importtime -c "import
api.lambda_handler"` shows where the import's time goes.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

from api.auth import make_local_token
from api.settings import PROJECT_ROOT
from scripts.benchmarks.harness import SECRET, local_engine_settings

EVENT = PROJECT_ROOT / "tests" / "deploy" / "events" / "query.json"
_CLIENT = "boto3.client('dynamodb', region_name='us-east-1', endpoint_url=os.environ['DYNAMODB_ENDPOINT'])"  # noqa: E501
KINDS = {
    "boto3 + client": f"import os, boto3; {_CLIENT}",
    "floor: strawberry, pynamodb, boto3 + client": (
        f"import os, strawberry, pynamodb.models, boto3; {_CLIENT}"
    ),
    "import api.lambda_handler": "import api.lambda_handler",
    "api.lambda_handler + first request": (
        "import json, os, types\n"
        "from api.lambda_handler import handler\n"
        "event = json.loads(os.environ['COLD_START_EVENT'])\n"
        "context = types.SimpleNamespace(aws_request_id='cold', function_name='api')\n"
        "answer = handler(event, context)\n"
        "assert answer['statusCode'] == 200, answer\n"
        "assert 'errors' not in json.loads(answer['body']), answer\n"
    ),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    with local_engine_settings() as settings:
        token = make_local_token(SECRET, "cold", ["cold"], 3600)
        event = EVENT.read_text().replace("{{tenant}}", "cold").replace("{{token}}", token)
        env = {
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
        times: dict[str, list[float]] = {kind: [] for kind in KINDS}
        cpu: dict[str, list[float]] = {kind: [] for kind in KINDS}
        for round_ in range(args.rounds + 1):
            for kind, code in KINDS.items():
                used = _children_cpu_s()
                started = time.perf_counter()
                subprocess.run([sys.executable, "-c", code], env=env, cwd=PROJECT_ROOT, check=True)
                if round_ > 0:  # the first writes the bytecode still missing
                    times[kind].append((time.perf_counter() - started) * 1000)
                    cpu[kind].append((_children_cpu_s() - used) * 1000)
    lows = {kind: min(t) for kind, t in times.items()}
    medians = {kind: statistics.median(t) for kind, t in times.items()}
    cpu_lows = {kind: min(t) for kind, t in cpu.items()}
    floor_kind = "floor: strawberry, pynamodb, boto3 + client"
    boto, floor = lows["boto3 + client"], lows[floor_kind]
    print(f"\ncold start, process start to exit, {args.rounds} interleaved rounds")
    print(
        f"{'':<46}{'min ms':>8}{'/ floor':>9}{'/ boto3':>9}{'median':>8}{'/ floor':>9}"
        f"{'CPU ms':>8}{'/ floor':>9}"
    )
    for kind, ms in lows.items():
        middle, used = medians[kind], cpu_lows[kind]
        print(
            f"{kind:<46}{ms:>8.0f}{ms / floor:>9.2f}{ms / boto:>9.2f}"
            f"{middle:>8.0f}{middle / medians[floor_kind]:>9.2f}"
            f"{used:>8.0f}{used / cpu_lows[floor_kind]:>9.2f}"
        )
    out = {"min_ms": lows, "median_ms": medians, "min_cpu_ms": cpu_lows}
    print(json.dumps({"rounds": args.rounds, **out}))
    return 0


def _children_cpu_s() -> float:
    """CPU seconds (user and system) of the children that have exited so far."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


if __name__ == "__main__":
    sys.exit(main())
