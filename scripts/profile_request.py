"""Where a request's time goes: the product's ASGI app called in process (no
network) for a poll with no changes, an incremental sync of 10, a page of 100, a
create and an update, against DynamoDB Local; cProfile's own time of every
function, summed by layer: HTTP (Starlette, middleware), authentication, GraphQL
parse / validate / execute, the service, the store (PynamoDB, botocore and the
socket to DynamoDB Local), serialization (JSON, compression).

Run with `scripts/profile-request [--requests N]`. Prints one table: milliseconds
per request by layer, and the layer's share.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import json
import pstats
import sys
import time
from collections.abc import Callable
from typing import Any

from api.app import create_app
from api.auth import make_local_token
from api.settings import Settings
from api.storage import models
from scripts.benchmarks.harness import CHANGES, CREATE, UPDATE, local_engine_settings
from scripts.benchmarks.harness import SECRET as BENCH_SECRET

# (layer, a path fragment of the function's file); the first that matches wins.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("authentication", ("/api/auth.py", "/jwt/", "/cryptography/")),
    # The request's log line and the operators' metrics (a server's: Prometheus).
    (
        "log line, metrics",
        (
            "/api/request_log.py",
            "/api/metrics.py",
            "/api/prometheus_metrics.py",
            "/prometheus_client/",
            "/aws_lambda_powertools/",
        ),
    ),
    ("GraphQL parse", ("/graphql/language/",)),
    ("GraphQL validate", ("/graphql/validation/", "/api/graphql/documents.py")),
    ("GraphQL execute", ("/graphql/execution/", "/strawberry/", "/api/graphql/", "/graphql/")),
    ("service", ("/api/service/", "/api/domain/", "/api/ordering.py", "/ulid/")),
    (
        "store (PynamoDB, botocore, socket)",
        ("/api/storage/", "/pynamodb/", "/botocore/", "/urllib3/", "socket", "/ssl.py", "/http/"),
    ),
    ("serialization", ("/json/", "/starlette_compress/", "zstandard", "brotli", "gzip", "zlib")),
    ("HTTP (Starlette, ASGI, middleware)", ("/starlette/", "/api/http.py", "/api/app.py")),
    ("asyncio, threads", ("/asyncio/", "/anyio/", "/threading.py", "/concurrent/")),
]


OTHER = "other (builtins, logging, ...)"
Func = tuple[str, int, str]


def _layers(
    func: Func, stats: dict[Func, Any], seen: dict[Func, dict[str, float]], depth: int = 0
) -> dict[str, float]:
    """The layers `func`'s own time belongs to: its file's, or, for a builtin or a
    library shared by layers (logging, email headers, abc), its callers' in
    proportion to the time each caller spent in it."""
    if func in seen:
        return seen[func]
    own = layer_of(func[0], func[2])
    callers = stats[func][4] if func in stats else {}
    if own != OTHER or not callers or depth > 20:
        seen[func] = {own: 1.0}
        return seen[func]
    seen[func] = {OTHER: 1.0}  # a cycle resolves to "other"
    total = sum(c[2] + c[3] for c in callers.values()) or 1.0
    shares: dict[str, float] = {}
    for caller, c in callers.items():
        for layer, share in _layers(caller, stats, seen, depth + 1).items():
            shares[layer] = shares.get(layer, 0.0) + share * (c[2] + c[3]) / total
    seen[func] = shares
    return shares


def layer_of(filename: str, function: str) -> str:
    where = function if filename == "~" else filename  # a builtin: named by its function
    for name, fragments in LAYERS:
        if any(f in where for f in fragments):
            return name
    return OTHER


async def _asgi_post(app: Any, body: bytes, headers: list[tuple[bytes, bytes]]) -> bytes:
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/graphql",
        "raw_path": b"/graphql",
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 8000),
    }
    sent = False
    chunks: list[bytes] = []

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            await asyncio.sleep(3600)
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(scope, receive, send)
    return b"".join(chunks)


async def _inline(func: Callable[..., Any], *args: Any) -> Any:
    return func(*args)


def profile(
    requests: int, settings: Settings | None = None, warm: int = 20
) -> dict[str, dict[str, float]]:
    """`requests` profiled of each case after `warm` unprofiled ones, on the engine of
    `settings` (`scripts/bench`'s), or on a DynamoDB Local of its own."""
    with contextlib.nullcontext(settings) if settings else local_engine_settings() as engine:
        return _profile(requests, engine, warm)


def _profile(requests: int, settings: Settings, warm: int) -> dict[str, dict[str, float]]:
    models.bind(settings)
    # cProfile sees one thread: the resolvers' store calls run inline here, not in
    # the worker thread they use in production (the hop itself is not measured).
    app = create_app(settings, run_blocking=_inline)
    token = make_local_token(BENCH_SECRET, "profiler", ["prof", "prof2"], 3600)
    headers = [
        (b"content-type", b"application/json"),
        (b"authorization", f"Bearer {token}".encode()),
    ]
    loop = asyncio.new_event_loop()

    def post(query: str, variables: dict[str, Any]) -> dict[str, Any]:
        body = json.dumps({"query": query, "variables": variables}).encode()
        raw = loop.run_until_complete(_asgi_post(app, body, headers))
        answer: dict[str, Any] = json.loads(raw)
        assert "errors" not in answer, answer
        return answer["data"]

    person = {"givenName": "Ann", "familyName": "Lee", "occupation": "Nurse"}
    people = [
        post(CREATE, {"i": {"tenantID": "prof", "person": person}})["createPerson"]["person"]
        for _ in range(110)
    ]
    since = people[-11]["changeToken"]
    head = people[-1]["changeToken"]
    target = dict(people[0])

    def update(i: int) -> None:
        variables = {
            "i": {
                "tenantID": "prof",
                "id": target["id"],
                "changeToken": target["changeToken"],
                "changes": {"occupation": f"n{i}"},
            }
        }
        target.update(post(UPDATE, variables)["updatePerson"]["person"])

    cases: dict[str, Callable[[int], object]] = {
        "poll, no changes": lambda i: post(CHANGES, {"t": "prof", "s": head}),
        "incremental sync of 10": lambda i: post(CHANGES, {"t": "prof", "s": since}),
        "page of 100": lambda i: post(CHANGES, {"t": "prof", "l": 100}),
        "createPerson": lambda i: post(CREATE, {"i": {"tenantID": "prof2", "person": person}}),
        "updatePerson": update,
    }
    results: dict[str, dict[str, float]] = {}
    for name, case in cases.items():
        for i in range(warm):  # caches, JIT of DynamoDB Local
            case(i)
        profiler = cProfile.Profile()
        started = time.perf_counter()
        profiler.enable()
        for i in range(requests):
            case(i)
        profiler.disable()
        wall = (time.perf_counter() - started) * 1000 / requests
        by_layer: dict[str, float] = {}
        raw_stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
        for func, row in raw_stats.items():
            for layer, share in _layers(func, raw_stats, {}).items():
                by_layer[layer] = by_layer.get(layer, 0.0) + row[2] * share * 1000 / requests
        results[name] = {"wall (profiled)": wall, **by_layer}
    loop.close()
    return results


def print_split(results: dict[str, dict[str, float]], requests: int) -> None:
    layers = [name for name, _ in LAYERS] + [OTHER]
    names = list(results)
    print(f"\nms per request by layer (cProfile own time, {requests} requests each)")
    print(f"{'layer':<38}" + "".join(f"{n[:14]:>16}" for n in names))
    for layer in ["wall (profiled)", *layers]:
        cells = []
        for n in names:
            value = results[n].get(layer, 0.0)
            if layer == "wall (profiled)":
                cells.append(f"{value:14.2f}  ")
            else:
                share = value / results[n]["wall (profiled)"] * 100
                cells.append(f"{value:8.2f} {share:4.0f}%  ")
        print(f"{layer:<38}" + "".join(cells))
    print("(cProfile adds its own cost to every call: read the shares, not the absolute times)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args(argv)
    print_split(profile(args.requests), args.requests)
    return 0


if __name__ == "__main__":
    sys.exit(main())
