"""The HTTP Lambda's import builds what a first sync needs and nothing else
(docs/cold-start.md): no S3 client, no realtime, no sweep, no GraphiQL; and its
SnapStart hook makes S3's client before the snapshot. A socket's `$connect` and the
sweep's build import no GraphQL and make no client they do not use. Checked in a
fresh Python, where nothing is imported yet, with botocore's client factory
counted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from api.settings import PROJECT_ROOT

# Fresh interpreters importing the whole app: some 4 s, left to --all.
pytestmark = pytest.mark.slow

# Run in a fresh interpreter: counts the clients botocore makes, imports the
# handler and runs what is given of a first invocation (`at_import`: the clients
# made by then), then plays Lambda's part and runs the hooks registered for a snapshot
# (a stand-in `snapshot_restore_py`, the library Lambda's Python runtimes include).
_PROBE = textwrap.dedent(
    """
    import importlib, json, sys, types
    import botocore.session

    made = []
    create = botocore.session.Session.create_client

    def counted(self, service_name, *args, **kwargs):
        made.append(service_name)
        return create(self, service_name, *args, **kwargs)

    botocore.session.Session.create_client = counted
    hooks = []
    if sys.argv[1] == "snapstart":
        library = types.ModuleType("snapshot_restore_py")
        library.register_before_snapshot = hooks.append
        sys.modules["snapshot_restore_py"] = library

    importlib.import_module(sys.argv[2])
    exec(sys.argv[3])  # a first invocation's part, or nothing

    at_import = list(made)
    modules = sorted(m for m in sys.modules if m == "api" or m.startswith("api."))
    packages = sorted({m.split(".")[0] for m in sys.modules})
    for hook in hooks:
        hook()
    modules_after_hooks = sorted(m for m in sys.modules if m.startswith("api."))
    print(json.dumps({
        "at_import": at_import, "after_hooks": made, "modules": modules,
        "packages": packages, "modules_after_hooks": modules_after_hooks,
    }))
    """
)
# Modules of what the HTTP function never serves: realtime (other functions, and
# WebSockets), the sweep (its own scheduled function), GraphiQL (off in production).
NEVER_IMPORTED = ("api.realtime", "api.sweep_handler", "api.service.blob_sweep", "api.graphiql")


def _probe(mode: str, module: str = "api.lambda_handler", then: str = "") -> dict[str, list[str]]:
    env = {
        **os.environ,
        "DYNAMODB_ENDPOINT": "http://127.0.0.1:9",  # nothing is called at import
        "S3_ENDPOINT": "http://127.0.0.1:9",
        "AWS_ACCESS_KEY_ID": "local",
        "AWS_SECRET_ACCESS_KEY": "local",
        "GRAPHIQL": "false",
        "SYNC_AUTH_SECRET": "a-secret-of-at-least-thirty-two-bytes",
        "WEBSOCKET_MANAGEMENT_URL": "http://127.0.0.1:9/ws",
    }
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, mode, module, then],
        env=env,
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    answer: dict[str, list[str]] = json.loads(result.stdout.splitlines()[-1])
    return answer


def test_importing_the_handler_makes_only_the_dynamodb_client() -> None:
    seen = _probe("plain")
    assert seen["at_import"] == ["dynamodb"]
    assert seen["after_hooks"] == ["dynamodb"]  # no snapshot, no hook: S3 waits for a use
    imported = [m for m in seen["modules"] if m.startswith(NEVER_IMPORTED)]
    assert not imported, imported
    assert "api.graphql.schema" in seen["modules"]  # the schema is built at import


def test_the_snapshot_holds_the_s3_client_too() -> None:
    seen = _probe("snapstart")
    assert seen["at_import"] == ["dynamodb"]
    assert seen["after_hooks"] == ["dynamodb", "s3"]


def test_the_realtime_snapshot_holds_the_runtime_its_first_invocation_needs() -> None:
    """The realtime functions (SnapStart: $connect, fan-out, drain) build their runtime
    on first use; Lambda's hook builds it before the snapshot, so a restored instance
    starts with its clients and schema."""
    seen = _probe("snapstart", "api.realtime.aws")
    assert seen["at_import"] == []
    assert {"dynamodb", "dynamodbstreams", "apigatewaymanagementapi"} <= set(seen["after_hooks"])


# A socket's $connect as API Gateway invokes the realtime function.
_CONNECT = textwrap.dedent(
    """
    from api.realtime.aws import websocket_handler
    answer = websocket_handler({
        "requestContext": {"routeKey": "$connect", "connectionId": "c="},
        "headers": {"Sec-WebSocket-Protocol": "graphql-transport-ws"},
    })
    assert answer["statusCode"] == 200, answer
    """
)
# What neither a $connect nor the sweep uses: GraphQL, the web stack, JWT.
_NOT_FOR_CONNECT_OR_SWEEP = ("strawberry", "graphql", "starlette", "mangum", "jwt", "cryptography")


def test_a_sockets_connect_imports_no_graphql_and_makes_no_client() -> None:
    """$connect checks the subprotocol: nothing of GraphQL, JWT, the service or
    PynamoDB is imported and no client made, as every socket's cold start waits for
    it (docs/cold-start.md); the SnapStart hook still builds and imports it all."""
    seen = _probe("snapstart", "api.realtime.aws", _CONNECT)
    assert seen["at_import"] == []
    loaded = [p for p in seen["packages"] if p in (*_NOT_FOR_CONNECT_OR_SWEEP, "pynamodb")]
    assert not loaded, loaded
    assert not [m for m in seen["modules"] if m.startswith(("api.graphql", "api.service"))]
    assert {"dynamodb", "dynamodbstreams", "apigatewaymanagementapi"} <= set(seen["after_hooks"])
    held = {"api.graphql.schema", "api.realtime.aws_messages", "api.realtime.fanout", "api.auth"}
    assert held <= set(seen["modules_after_hooks"])


def test_the_sweeps_build_imports_no_graphql_and_makes_no_s3_client() -> None:
    """The sweep (no SnapStart: every hourly start is cold) imports no GraphQL, no
    boto3 (PynamoDB's botocore client reads the registry) and none of the service's
    other capabilities, and makes S3's client when a tenant's pass first needs it,
    not when it is built."""
    seen = _probe("plain", "api.sweep_handler", "import api.sweep_handler as h; h.build()")
    assert seen["at_import"] == ["dynamodb"]
    loaded = [p for p in seen["packages"] if p in (*_NOT_FOR_CONNECT_OR_SWEEP, "boto3")]
    assert not loaded, loaded
    assert not [m for m in seen["modules"] if m.startswith(("api.graphql", "api.realtime"))]
    # Nor the service's composition and the capabilities it wires (api.service's
    # names are imported on first use): the sweep is one capability.
    wired = ("api.service.sync_service", "api.service.writing", "api.service.reading")
    assert not [m for m in seen["modules"] if m in wired]
