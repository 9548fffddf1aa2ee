"""A Lambda's cold start, measured here: a fresh Python process that imports
`api.lambda_handler` and answers one HTTP API request (a `changes` query) against
DynamoDB Local, against two floors run in the same rounds, interleaved:
importing boto3 and creating a DynamoDB client; and the stack's floor, importing
strawberry, pynamodb and boto3 and creating that client (what this stack cannot
avoid). Process start to exit, medians of several rounds.

Run with `scripts/bench-cold-start [--rounds N]`; `python -X importtime -c "import
api.lambda_handler"` shows where the import's time goes.
"""

from __future__ import annotations

import argparse
import json
import os
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
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args(argv)
    with local_engine_settings() as settings:
        token = make_local_token(SECRET, "cold", ["cold"], 3600)
        event = EVENT.read_text().replace("{{tenant}}", "cold").replace("{{token}}", token)
        env = {
            **os.environ,
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
        for _ in range(args.rounds):
            for kind, code in KINDS.items():
                started = time.perf_counter()
                subprocess.run([sys.executable, "-c", code], env=env, cwd=PROJECT_ROOT, check=True)
                times[kind].append((time.perf_counter() - started) * 1000)
    medians = {kind: statistics.median(t) for kind, t in times.items()}
    boto, floor = medians["boto3 + client"], medians["floor: strawberry, pynamodb, boto3 + client"]
    print(f"\ncold start, process start to exit, median of {args.rounds} interleaved rounds")
    print(f"{'':<46}{'ms':>8}{'/ floor':>9}{'/ boto3':>9}")
    for kind, ms in medians.items():
        print(f"{kind:<46}{ms:>8.0f}{ms / floor:>9.2f}{ms / boto:>9.2f}")
    out = {"rounds": args.rounds, "median_ms": medians, "runs_ms": times}
    print(json.dumps(out["median_ms"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
