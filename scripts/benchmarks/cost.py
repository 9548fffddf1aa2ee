"""What an operation costs on AWS all in, on the shipped configuration, beside
AWS AppSync's list price for the same operation with the same DynamoDB work.

The shipped configuration is serverless.yml's: API Gateway's HTTP API in front of
the function, the provider's memory on arm64. Per operation: one HTTP API request
(more when a request or its answer passes the 512 KB it is metered by); one Lambda
request and its duration at that memory, the duration being the handler's time
measured here, in process: `api.lambda_handler`'s Mangum handler called with an
HTTP API event, against DynamoDB Local, the mean over warm calls of each call's
time rounded up to Lambda's billed millisecond; the DynamoDB units of the same
operation's row (by AWS's rules, `scripts/benchmarks/harness.py`); S3, none: these
operations make no S3 request (the app's S3 client is made on first use, and is
checked to be still unmade); CloudWatch: the request's log line, which is the
operators' metrics' EMF document (`api.metrics`), ingested and kept by CloudWatch
Logs, its bytes measured here; the metrics' fixed monthly cost (custom metrics,
alarm metrics, the dashboard) is printed below the table. AppSync: its price per
query or mutation plus the same DynamoDB work, billed apart; and, for each row that
writes, AppSync with the DynamoDB writes Amplify DataStore's own resolvers make
(`scripts/benchmarks/datastore.py`): what an app leaving AppSync would compare with.

Where the two cross: the handler time (at the configured memory) above which
AppSync is cheaper, and the same behind a Lambda function URL, which has no
charge of its own. Prices: `scripts/benchmarks/prices.py`.
"""

from __future__ import annotations

import json
import math
import random
import re
import time
from types import SimpleNamespace
from typing import Any

from mangum import Mangum

from api import metrics
from api.app import create_lambda_app
from api.settings import PROJECT_ROOT
from scripts.benchmarks import datastore
from scripts.benchmarks.harness import CHANGES, CREATE, PUSH, UPDATE, Harness, realistic_person
from scripts.benchmarks.prices import (
    APPSYNC_OPERATION_USD,
    CLOUDWATCH_ALARM_METRIC_MONTH_USD,
    CLOUDWATCH_CUSTOM_METRIC_MONTH_USD,
    CLOUDWATCH_DASHBOARD_MONTH_USD,
    CLOUDWATCH_LOGS_INGEST_GB_USD,
    CLOUDWATCH_LOGS_STORAGE_GB_MONTH_USD,
    CLOUDWATCH_PRICES_AS_OF,
    COMPUTE_PRICES_AS_OF,
    FUNCTION_URL_REQUEST_USD,
    GB,
    HTTP_API_METERED_BYTES,
    HTTP_API_REQUEST_USD,
    LAMBDA_ARM64_GB_SECOND_USD,
    LAMBDA_BILLED_MS,
    LAMBDA_REQUEST_USD,
    PRICES_AS_OF,
    per_million_ops,
)
from scripts.benchmarks.writes import units_person

EVENT = PROJECT_ROOT / "tests" / "deploy" / "events" / "query.json"
TENANT = "cost"
M = 1_000_000
# The operations priced, and the row of the bench's table that holds their units.
ROWS = {
    "poll, no changes": "changes: poll, no changes",
    "incremental sync of 10": "changes: incremental, 10 changes",
    "page of 100": "changes: page of 100 Person",
    "create": "createPerson",
    "update": "updatePerson",
    "push of 100 updates": "pushChanges: 100 updates",
}


def shipped_lambda() -> tuple[int, str]:
    """The provider's memory (MB) and architecture in serverless.yml, stated there once."""
    text = (PROJECT_ROOT / "serverless.yml").read_text()
    memory = re.search(r"^  memorySize: (\d+)$", text, re.MULTILINE)
    architecture = re.search(r"^  architecture: (\w+)$", text, re.MULTILINE)
    assert memory and architecture, "serverless.yml: no provider memorySize or architecture"
    return int(memory[1]), architecture[1]


def measure_cost(h: Harness) -> dict[str, Any]:
    """The handler's time per operation, priced with the rows' units."""
    print("==> all-in cost: the Lambda handler, in process", flush=True)
    memory_mb, architecture = shipped_lambda()
    assert architecture == "arm64", f"prices are arm64's, serverless.yml says {architecture}"
    emf = EmfLines()
    app = create_lambda_app(h.settings, sink=metrics.Emf(emf))  # as api.lambda_handler serves it
    handler = Mangum(app, lifespan="off")
    template = json.loads(EVENT.read_text())
    template["headers"]["authorization"] = h.headers["Authorization"]
    sizes: dict[str, int] = {}
    context: Any = SimpleNamespace(aws_request_id="cost", function_name="api")

    def call(name: str, query: str, variables: dict[str, Any]) -> dict[str, Any]:
        event = {**template, "body": json.dumps({"query": query, "variables": variables})}
        answer = handler(event, context)
        body: dict[str, Any] = json.loads(answer["body"])
        assert answer["statusCode"] == 200 and "errors" not in body, body
        sizes[name] = max(sizes.get(name, 0), len(event["body"]), len(answer["body"]))
        return body["data"]

    people = _seed(call)
    person = realistic_person(random.Random(3), 0)
    # The last ten created after `since`: an incremental sync of 10 (the reads are
    # measured before the writes below add changes).
    since, head = people[-11]["changeToken"], people[-1]["changeToken"]
    target = people[0]
    batch = people[:100]

    def update(i: int) -> None:
        _update(call, "update", target, f"job {i}")

    def push(i: int) -> None:
        entries = [{"updatePerson": _change(p, f"push {i}")} for p in batch]
        data = call("push of 100 updates", PUSH, {"i": {"tenantID": TENANT, "mutations": entries}})
        batch[:] = [r["item"] for r in data["pushChanges"]["results"]]

    cases = {
        "poll, no changes": lambda i: call("poll, no changes", CHANGES, {"t": TENANT, "s": head}),
        "incremental sync of 10": lambda i: call(
            "incremental sync of 10", CHANGES, {"t": TENANT, "s": since}
        ),
        "page of 100": lambda i: call("page of 100", CHANGES, {"t": TENANT, "l": 100}),
        "create": lambda i: call("create", CREATE, {"i": {"tenantID": TENANT, "person": person}}),
        "update": update,
        "push of 100 updates": push,
    }
    rows = {r["operation"]: r for r in h.rows if r["clients"] == 1}
    gb = memory_mb / 1024
    out: dict[str, Any] = {}
    # A smoke run (figures not read): the fewest calls that fill the row.
    pushes = 2 if h.smoke else max(5, h.iterations // 10)
    warm = 2 if h.smoke else 10
    for name, case in cases.items():
        count = h.iterations if name != "push of 100 updates" else pushes
        for i in range(warm):  # caches, DynamoDB Local's JIT
            case(i)
        billed = []
        emf.clear()
        for i in range(count):
            started = time.perf_counter()
            case(warm + i)
            ms = (time.perf_counter() - started) * 1000
            billed.append(math.ceil(ms / LAMBDA_BILLED_MS) * LAMBDA_BILLED_MS)
        row = rows[ROWS[name]]
        out[name] = price(
            sum(billed) / len(billed),
            gb,
            row["read_units"],
            row["write_units"],
            max(1, math.ceil(sizes[name] / HTTP_API_METERED_BYTES)),
            log_bytes=emf.bytes / count,
        )
        # The row's DynamoDB units are of this person's writes (writes.py): so are
        # DataStore's.
        out[name]["appsync_datastore"] = datastore.comparator(name, units_person())
    assert not app.state.s3.made, "an operation priced here made an S3 request"
    return {
        "memory_mb": memory_mb,
        "architecture": architecture,
        "operations": out,
        "cloudwatch_month": cloudwatch_month(len(emf.series)),
    }


class EmfLines:
    """Where the Lambda's EMF lines go here: their bytes, and the custom metrics
    (a metric name with its dimensions' values) they create."""

    def __init__(self) -> None:
        self.bytes = 0
        self.series: set[tuple[str, tuple[tuple[str, str], ...]]] = set()

    def clear(self) -> None:
        self.bytes = 0

    def write(self, line: str) -> int:
        self.bytes += len(line.encode())
        document = json.loads(line)
        for directive in document["_aws"]["CloudWatchMetrics"]:
            for definition in directive["Metrics"]:
                for dims in directive["Dimensions"]:
                    values = tuple((d, document[d]) for d in dims)
                    self.series.add((definition["Name"], values))
        return len(line)


def alarm_metrics() -> int:
    """The metrics serverless.yml's alarms read (each is billed)."""
    return len(re.findall(r"\bMetricName: ", (PROJECT_ROOT / "serverless.yml").read_text()))


def cloudwatch_month(series: int) -> dict[str, float]:
    """The metrics' fixed cost a month: `series` custom metrics, the alarms' metrics,
    one dashboard (past the three free)."""
    alarms = alarm_metrics()
    return {
        "custom_metrics": series,
        "custom_metrics_usd": series * CLOUDWATCH_CUSTOM_METRIC_MONTH_USD,
        "alarm_metrics": alarms,
        "alarms_usd": alarms * CLOUDWATCH_ALARM_METRIC_MONTH_USD,
        "dashboard_usd": CLOUDWATCH_DASHBOARD_MONTH_USD,
    }


def price(
    billed_ms: float,
    gb: float,
    read_units: float,
    write_units: float,
    http_requests: int = 1,
    log_bytes: float = 0.0,
) -> dict[str, float]:
    """Dollars per million operations, by part, and where AppSync costs the same.
    `log_bytes`: the request's log line (its EMF document), ingested and kept a
    month (serverless.yml's logRetentionInDays: 30)."""
    http_api = http_requests * HTTP_API_REQUEST_USD * M
    cloudwatch = (
        log_bytes * M / GB * (CLOUDWATCH_LOGS_INGEST_GB_USD + CLOUDWATCH_LOGS_STORAGE_GB_MONTH_USD)
    )
    requests = LAMBDA_REQUEST_USD * M
    per_ms = gb * LAMBDA_ARM64_GB_SECOND_USD / 1000 * M  # $ per million of 1 ms each
    duration = billed_ms * per_ms
    dynamodb = per_million_ops(read_units, write_units)
    total = http_api + requests + duration + dynamodb + cloudwatch
    appsync = APPSYNC_OPERATION_USD * M + dynamodb
    url = FUNCTION_URL_REQUEST_USD * M
    return {
        "billed_ms": billed_ms,
        "http_api": http_api,
        "lambda_requests": requests,
        "lambda_duration": duration,
        "dynamodb": dynamodb,
        "s3": 0.0,
        "cloudwatch": cloudwatch,
        "total": total,
        "appsync": appsync,
        "function_url_total": total - http_api + url,
        # The handler time at which each costs what AppSync does (the same DynamoDB
        # work on both sides cancels out).
        "crossover_ms": (APPSYNC_OPERATION_USD * M - http_api - requests - cloudwatch) / per_ms,
        "crossover_ms_function_url": (APPSYNC_OPERATION_USD * M - url - requests - cloudwatch)
        / per_ms,
    }


def print_cost(cost: dict[str, Any]) -> None:
    memory, ops = cost["memory_mb"], cost["operations"]
    print(
        f"\nall in, $ per million operations: HTTP API + Lambda ({memory} MB, "
        f"{cost['architecture']}) + DynamoDB + S3 + CloudWatch Logs (the request's EMF "
        "line), against AppSync + the same DynamoDB, and (writes) AppSync + DataStore's "
        "own DynamoDB writes"
    )
    header = (
        f"{'operation':<26}{'billed ms':>10}{'HTTP API':>9}{'Lambda':>7}{'GB-s':>8}"
        f"{'DynamoDB':>9}{'S3':>5}{'CW logs':>8}{'total':>8}{'AppSync':>9}{'AppSync/':>9}"
        f"{'equal at':>10}{'DataStore':>10}{'DS/':>6}"
    )
    print(header)
    print("-" * len(header))
    for name, c in ops.items():
        found = c.get("appsync_datastore")
        compared = f"{found['total']:>10.2f}{found['total'] / c['total']:>6.2f}" if found else ""
        print(
            f"{name:<26}{c['billed_ms']:>10.1f}{c['http_api']:>9.2f}{c['lambda_requests']:>7.2f}"
            f"{c['lambda_duration']:>8.2f}{c['dynamodb']:>9.2f}{c['s3']:>5.1f}"
            f"{c['cloudwatch']:>8.2f}{c['total']:>8.2f}"
            f"{c['appsync']:>9.2f}{c['appsync'] / c['total']:>9.2f}"
            f"{c['crossover_ms']:>8.0f}ms{compared}"
        )
    first = next(iter(ops.values()))
    print(
        f"(equal at: the handler time above which AppSync is cheaper, at {memory} MB; "
        f"{first['crossover_ms_function_url']:.0f} ms behind a function URL. "
        f"{COMPUTE_PRICES_AS_OF}; {PRICES_AS_OF})"
    )
    for name, c in ops.items():
        found = c.get("appsync_datastore")
        if found:
            print(
                f"DataStore, {name}: {found['mutations']} AppSync request"
                f"{'s' if found['mutations'] > 1 else ''}, each: "
                f"{datastore.describe(found)}: {found['write_units']} write units in all, "
                f"against this API's ${c['dynamodb']:.3f} of DynamoDB"
            )
    for line in datastore.verdicts(ops):
        print(line)
    month = cost["cloudwatch_month"]
    print(
        f"the metrics' fixed cost a month: {month['custom_metrics']} custom metrics this "
        f"run's traffic made ${month['custom_metrics_usd']:.2f} (each more root field and "
        f"outcome in use adds some), {month['alarm_metrics']} alarm metrics "
        f"${month['alarms_usd']:.2f}, the dashboard ${month['dashboard_usd']:.2f} "
        f"({CLOUDWATCH_PRICES_AS_OF})"
    )


def _seed(call: Any) -> list[dict[str, Any]]:
    """110 people of the cost tenant, created by one push and a create each past 100."""
    person = realistic_person(random.Random(3), 0)
    entries = [{"createPerson": {"tenantID": TENANT, "person": person}}] * 100
    data = call("seed", PUSH, {"i": {"tenantID": TENANT, "mutations": entries}})
    people = [r["item"] for r in data["pushChanges"]["results"]]
    more = [{"createPerson": {"tenantID": TENANT, "person": person}}] * 10
    data = call("seed", PUSH, {"i": {"tenantID": TENANT, "mutations": more}})
    return people + [r["item"] for r in data["pushChanges"]["results"]]


def _change(person: dict[str, Any], occupation: str) -> dict[str, Any]:
    return {
        "tenantID": TENANT,
        "id": person["id"],
        "changeToken": person["changeToken"],
        "changes": {"occupation": occupation},
    }


def _update(call: Any, name: str, person: dict[str, Any], occupation: str) -> None:
    data = call(name, UPDATE, {"i": _change(person, occupation)})
    person.update(data["updatePerson"]["person"])
