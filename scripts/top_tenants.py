"""`scripts/top-tenants`: the tenants that used the most DynamoDB capacity, with
what they cost at `scripts/benchmarks/prices.py`'s rates, read from request log
lines (`api.request_log`: one JSON object a request, after whatever prefix the
log's format gives it; on Lambda the same object is the EMF document).

The same answer as the CloudWatch Logs Insights query docs/operations.md ships
(`--query` prints it, with the dollars at the same rates).

Attributed to a tenant: its requests' read and write units, and for each HTTP
request one HTTP API request, one Lambda request and its duration at the function's
memory (serverless.yml's memorySize). Not attributed: attachments' and exports'
S3 storage, requests and transfer; WebSocket connection minutes and messages; the
stream's fan-out, the drain and the sweep (their functions' time and their
DynamoDB units); requests refused before their tenant was known; the metrics' own
CloudWatch cost. Each is in `scripts/bench`'s all-in rows instead."""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from api.settings import PROJECT_ROOT
from scripts.benchmarks import prices

# The Logs Insights query: the same sums, by tenant, the most capacity first.
INSIGHTS_QUERY = """\
filter ispresent(tenant) and ispresent(capacityUnits)
| stats count(*) as requests, sum(capacityUnits) as capacity, sum(writeUnits) as writes,
    sum(durationMs) / 1000 as seconds by tenant
| sort capacity desc
| limit 10"""


def memory_gb() -> float:
    """The HTTP function's memory, serverless.yml's provider memorySize (in GB)."""
    text = (PROJECT_ROOT / "serverless.yml").read_text()
    match = re.search(r"^  memorySize: (\d+)$", text, re.MULTILINE)
    assert match, "no provider memorySize in serverless.yml"
    return int(match.group(1)) / 1024


@dataclass
class Usage:
    tenant: str
    requests: int = 0  # over HTTP (a socket's operations are not HTTP API requests)
    capacity: float = 0.0
    writes: float = 0.0
    seconds: float = 0.0  # HTTP requests' durations

    @property
    def reads(self) -> float:
        return self.capacity - self.writes

    def dollars(self, gb: float) -> float:
        return (
            self.reads * prices.READ_UNIT_USD
            + self.writes * prices.WRITE_UNIT_USD
            + self.requests * (prices.HTTP_API_REQUEST_USD + prices.LAMBDA_REQUEST_USD)
            + self.seconds * gb * prices.LAMBDA_ARM64_GB_SECOND_USD
        )


def request_lines(lines: Iterable[str]) -> Iterable[dict[str, Any]]:
    """The request log records among `lines` (anything before the object is a prefix)."""
    for line in lines:
        start = line.find('{"')
        if start < 0:
            continue
        try:
            record = json.loads(line[start:])
        except ValueError:
            continue
        if isinstance(record, dict) and "requestId" in record and "capacityUnits" in record:
            yield record


def usage_by_tenant(records: Iterable[dict[str, Any]]) -> dict[str, Usage]:
    usage: dict[str, Usage] = {}
    for record in records:
        tenant = record.get("tenant")
        if not tenant:
            continue
        u = usage.setdefault(tenant, Usage(tenant))
        u.capacity += float(record["capacityUnits"])
        u.writes += float(record.get("writeUnits", 0))
        if not str(record["requestId"]).startswith("ws-"):
            u.requests += 1
            u.seconds += float(record.get("durationMs", 0)) / 1000
    return usage


def top(usage: dict[str, Usage], n: int) -> list[Usage]:
    return sorted(usage.values(), key=lambda u: (-u.capacity, u.tenant))[:n]


def table(rows: list[Usage], gb: float, out: TextIO) -> None:
    total = sum(u.dollars(gb) for u in rows) or 1.0
    out.write(
        f"{'tenant':<32} {'requests':>9} {'read units':>11} {'write units':>12} "
        f"{'GB-s':>9} {'USD':>12} {'share':>6}\n"
    )
    for u in rows:
        out.write(
            f"{u.tenant[:32]:<32} {u.requests:>9} {u.reads:>11.1f} {u.writes:>12.1f} "
            f"{u.seconds * gb:>9.3f} {u.dollars(gb):>12.8f} {u.dollars(gb) / total:>6.1%}\n"
        )
    out.write(
        f"At {prices.PRICES_AS_OF}; {prices.COMPUTE_PRICES_AS_OF} ({gb:g} GB function). "
        "Not attributed: S3 storage, requests and transfer; WebSocket minutes and messages; "
        "fan-out, drain and sweep; requests without a tenant; CloudWatch.\n"
    )


def query_with_dollars(gb: float) -> str:
    """The Insights query with a dollar column at prices.py's rates."""
    return INSIGHTS_QUERY.replace(
        "| sort",
        "| fields tenant, requests, capacity, writes, seconds,\n"
        f"    (capacity - writes) * {prices.READ_UNIT_USD!r} + writes * {prices.WRITE_UNIT_USD!r}"
        f" + requests * {prices.HTTP_API_REQUEST_USD + prices.LAMBDA_REQUEST_USD!r}"
        f" + seconds * {gb * prices.LAMBDA_ARM64_GB_SECOND_USD!r} as usd\n| sort",
        1,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/top-tenants", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("logs", nargs="*", type=Path, help="log files (default: stdin)")
    parser.add_argument("--top", type=int, default=10)
    parser.add_argument(
        "--query", action="store_true", help="print the Logs Insights query, with dollars"
    )
    args = parser.parse_args(argv)
    gb = memory_gb()
    if args.query:
        print(query_with_dollars(gb))
        return 0
    usage: dict[str, Usage] = {}
    for path in args.logs or [None]:
        if path is None:
            found = usage_by_tenant(request_lines(sys.stdin))
        else:
            with path.open(errors="replace") as source:
                found = usage_by_tenant(request_lines(source))
        for tenant, u in found.items():
            into = usage.setdefault(tenant, Usage(tenant))
            into.requests += u.requests
            into.capacity += u.capacity
            into.writes += u.writes
            into.seconds += u.seconds
    table(top(usage, args.top), gb, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
