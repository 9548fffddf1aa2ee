"""Production deployment, checked offline: the packaged template, cfn-lint, the handler."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import logging
import os
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from starlette.testclient import TestClient

from api.domain.catalog import RELEASE
from api.settings import PROJECT_ROOT, Settings
from api.storage.blobs import cors_configuration
from api.storage.table import definition
from scripts.local_s3 import LIFECYCLE_RULES
from tests.support import node_packages
from tests.support.gql import bearer

EVENTS = Path(__file__).with_name("events")
TABLE_ACTIONS = {
    "dynamodb:GetItem",
    "dynamodb:Query",
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "dynamodb:DeleteItem",
    "dynamodb:ConditionCheckItem",
}
STREAM_ACTIONS = {
    "dynamodb:GetRecords",
    "dynamodb:GetShardIterator",
    "dynamodb:DescribeStream",
    "dynamodb:ListStreams",
}


def _run(args: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(args, capture_output=True, text=True, timeout=600, **kwargs)
    assert result.returncode == 0, (
        f"{args[0]} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    )
    return result


@pytest.fixture(scope="session")
def serverless_bin() -> Path:
    """The Serverless Framework v3 from npm, pinned, installed once into .cache/."""
    return node_packages.install(node_packages.SERVERLESS) / "node_modules" / ".bin" / "serverless"


@pytest.fixture(scope="session")
def packaged(serverless_bin: Path) -> dict[str, Any]:
    """Build the Lambda artifact and run `serverless package`; the CloudFormation template."""
    _run([str(PROJECT_ROOT / "scripts" / "package-lambda")], cwd=PROJECT_ROOT)
    env = {
        **os.environ,
        "SLS_TELEMETRY_DISABLED": "1",
        "SLS_NOTIFICATIONS_MODE": "off",
        # Packaging talks to no AWS service; the SDK only wants credentials to exist.
        "AWS_ACCESS_KEY_ID": "offline",
        "AWS_SECRET_ACCESS_KEY": "offline",
    }
    _run(
        [str(serverless_bin), "package", "--stage", "ci", "--region", "eu-west-1"],
        cwd=PROJECT_ROOT,
        env=env,
    )
    template_path = PROJECT_ROOT / ".serverless" / "cloudformation-template-update-stack.json"
    template: dict[str, Any] = json.loads(template_path.read_text())
    template["_path"] = str(template_path)
    return template


def _resources(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == kind}


# The one warning let through: the Serverless Framework's own DependsOn on a function's
# role and an alias's function, which the GetAtt or Ref beside it already implies.
FRAMEWORKS_WARNINGS = {"W3005"}


def test_cfn_lint_finds_no_errors_or_warnings(packaged: dict[str, Any]) -> None:
    """A warning is a template that may not do what it says (W8003: a condition that
    packaging already decided), so it fails too, but the framework's own."""
    result = subprocess.run(
        [str(Path(sys.executable).with_name("cfn-lint")), "--format", "json", packaged["_path"]],
        capture_output=True,
        text=True,
        timeout=300,
    )
    findings = json.loads(result.stdout or "[]")
    found = [
        f"{f['Rule']['Id']} {'/'.join(map(str, f['Location']['Path']))}: {f['Message']}"
        for f in findings
        if f["Level"] == "Error"
        or (f["Level"] == "Warning" and f["Rule"]["Id"] not in FRAMEWORKS_WARNINGS)
    ]
    assert found == [], found


def test_the_table_is_the_one_the_local_scripts_create(packaged: dict[str, Any]) -> None:
    table = packaged["Resources"]["SyncTable"]
    assert table["DeletionPolicy"] == "Retain"
    properties = table["Properties"]
    for key, value in definition().items():
        assert properties[key] == value, key
    assert properties["TableName"] == "offline-sync-api-ci"
    assert properties["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert properties["DeletionProtectionEnabled"] is True
    assert properties["SSESpecification"] == {"SSEEnabled": True}
    assert properties["TimeToLiveSpecification"]["AttributeName"] == "exp"


def _statements(packaged: dict[str, Any], role: str) -> list[dict[str, Any]]:
    properties = packaged["Resources"][role]["Properties"]
    return [s for p in properties["Policies"] for s in p["PolicyDocument"]["Statement"]]


def _actions(statement: dict[str, Any]) -> set[str]:
    action = statement["Action"]
    return {action} if isinstance(action, str) else set(action)


def test_each_function_may_do_only_what_its_code_does(packaged: dict[str, Any]) -> None:
    # No default role: Serverless would give it ManageConnections on every API.
    roles = _resources(packaged, "AWS::IAM::Role")
    assert set(roles) == {
        "ApiRole",
        "RealtimeRole",
        "FanoutRole",
        "DrainRole",
        "SweepRole",
        "PushFlushRole",
    }
    for function in _resources(packaged, "AWS::Lambda::Function").values():
        assert function["Properties"]["Role"]["Fn::GetAtt"][0] in roles
    table = [{"Fn::GetAtt": ["SyncTable", "Arn"]}]
    stream = [{"Fn::GetAtt": ["SyncTable", "StreamArn"]}]
    queue = [{"Fn::GetAtt": ["FanoutFailures", "Arn"]}]
    pushes = [{"Fn::GetAtt": ["PushFlushes", "Arn"]}]
    devices = frozenset(
        {"dynamodb:GetItem", "dynamodb:Query", "dynamodb:UpdateItem", "dynamodb:DeleteItem"}
    )
    marking = devices | {"dynamodb:ConditionCheckItem"}  # the head's mark, a transaction
    expected = {
        "ApiRole": {frozenset(TABLE_ACTIONS | {"dynamodb:BatchGetItem"}): table},
        "RealtimeRole": {frozenset(TABLE_ACTIONS - {"dynamodb:ConditionCheckItem"}): table},
        "SweepRole": {frozenset(TABLE_ACTIONS): table},
        "FanoutRole": {
            marking: table,
            frozenset(STREAM_ACTIONS): stream,
            frozenset({"sqs:SendMessage"}): queue + pushes,
        },
        "DrainRole": {
            marking: table,
            frozenset({"dynamodb:GetRecords", "dynamodb:GetShardIterator"}): stream,
            frozenset({"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes"}): (
                queue
            ),
            frozenset({"sqs:SendMessage"}): pushes,
        },
        "PushFlushRole": {
            marking: table,  # a former member's device removed: its check, a transaction
            frozenset(
                {
                    "sqs:ReceiveMessage",
                    "sqs:DeleteMessage",
                    "sqs:GetQueueAttributes",
                    "sqs:SendMessage",
                }
            ): pushes,
        },
    }
    # SNS Mobile Push: the API makes endpoints, the pushes publish and delete them.
    sns_grants = {
        role: {
            frozenset(_actions(s)): s["Resource"][0]["Fn::Join"][1][-1]
            for s in _statements(packaged, role)
            if any(a.startswith("sns:") for a in _actions(s))
        }
        for role in expected
    }
    assert sns_grants == {
        "ApiRole": {
            frozenset({"sns:CreatePlatformEndpoint"}): ":app/*",
            frozenset({"sns:GetEndpointAttributes", "sns:SetEndpointAttributes"}): ":endpoint/*",
        },
        "RealtimeRole": {},
        "SweepRole": {},
        **{
            role: {frozenset({"sns:Publish", "sns:DeleteEndpoint"}): ":endpoint/*"}
            for role in ("FanoutRole", "DrainRole", "PushFlushRole")
        },
    }
    for role, grants in expected.items():
        statements = _statements(packaged, role)
        data = {
            frozenset(_actions(s)): s["Resource"]
            for s in statements
            if any(a.startswith(("dynamodb:", "sqs:")) for a in _actions(s))
        }
        assert data == grants, role
        manage = [s for s in statements if "execute-api:ManageConnections" in _actions(s)]
        if role in ("ApiRole", "SweepRole", "PushFlushRole"):
            assert manage == []
        else:
            (statement,) = manage
            assert _actions(statement) == {"execute-api:ManageConnections"}
            (arn,) = statement["Resource"]
            parts = arn["Fn::Join"][1]
            assert {"Ref": "WebsocketsApi"} in parts and parts[-1] == "/ci/*/@connections/*"
        for statement in statements:
            assert not any("*" in a for a in _actions(statement))
            assert statement["Resource"] not in ("*", ["*"])


def test_the_bucket_is_private_encrypted_and_reached_only_under_tenants_and_exports(
    packaged: dict[str, Any],
) -> None:
    bucket = packaged["Resources"]["BlobBucket"]
    assert bucket["Type"] == "AWS::S3::Bucket" and bucket["DeletionPolicy"] == "Retain"
    properties = bucket["Properties"]
    (sse,) = properties["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    assert sse["ServerSideEncryptionByDefault"]["SSEAlgorithm"] in ("AES256", "aws:kms")
    assert properties["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True,
        "BlockPublicPolicy": True,
        "IgnorePublicAcls": True,
        "RestrictPublicBuckets": True,
    }
    rules = {r["Id"]: r for r in properties["LifecycleConfiguration"]["Rules"]}
    assert all(r["Status"] == "Enabled" for r in rules.values())
    abort = rules["abort-incomplete-multipart-uploads"]
    assert abort["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 1}
    # Versioned for the sweep (docs/attachments.md); replaced versions go after a day.
    assert properties["VersioningConfiguration"] == {"Status": "Enabled"}
    replaced = rules["expire-replaced-versions"]
    assert replaced["NoncurrentVersionExpiration"] == {"NoncurrentDays": 1}
    assert replaced["ExpiredObjectDeleteMarker"] is True
    assert "Prefix" not in replaced  # blobs and exports alike
    # Exports' files are kept 7 days, as their jobs (contract 3.9).
    exports = rules["expire-exports"]
    assert (exports["Prefix"], exports["ExpirationInDays"]) == ("exports/", 7)
    # The local bucket has the same rules (scripts/local_s3.py).
    local_rules = {r["ID"]: r for r in LIFECYCLE_RULES}
    assert set(local_rules) == set(rules)
    assert local_rules["expire-exports"]["Filter"] == {"Prefix": "exports/"}
    assert local_rules["expire-exports"]["Expiration"] == {"Days": 7}
    assert local_rules["expire-replaced-versions"]["Filter"] == {"Prefix": ""}
    # CORS: the local bucket's rule (blob_cors.json), for the param's origins; that its
    # headers are those a presigned upload lists is checked against the local engine
    # (tests/integration/test_local_s3.py).
    (cors,) = properties["CorsConfiguration"]["CorsRules"]
    local = cors_configuration(["*"])["CORSRules"][0]
    assert cors == {
        "AllowedOrigins": {"Fn::Split": [",", "*"]},
        "AllowedMethods": local["AllowedMethods"],
        "AllowedHeaders": local["AllowedHeaders"],
        "ExposedHeaders": local["ExposeHeaders"],
        "MaxAge": local["MaxAgeSeconds"],
    }
    (deny,) = packaged["Resources"]["BlobBucketPolicy"]["Properties"]["PolicyDocument"]["Statement"]
    assert deny["Effect"] == "Deny"
    assert deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    # The API's role: the objects under tenants/ and exports/ (HeadObject, presigned
    # PUT and GET, an export's PUT or multipart upload, every version and incomplete
    # upload of a deleted tenant), and ListBucket on the bucket (HeadBucket; 404
    # rather than 403 for a missing object), its versions and multipart uploads.
    arn = {"Fn::GetAtt": ["BlobBucket", "Arn"]}
    objects = [{"Fn::Join": ["", [arn, "/tenants/*"]]}]
    listing = frozenset({"s3:ListBucket", "s3:ListBucketVersions"})
    assert _s3(packaged, "ApiRole") == {
        frozenset(
            {"s3:GetObject", "s3:PutObject", "s3:DeleteObjectVersion", "s3:AbortMultipartUpload"}
        ): [*objects, {"Fn::Join": ["", [arn, "/exports/*"]]}],
        listing | {"s3:ListBucketMultipartUploads"}: [arn],
    }
    # The sweep's: also the version a mark copies.
    assert _s3(packaged, "SweepRole") == {
        frozenset(
            {"s3:GetObject", "s3:GetObjectVersion", "s3:PutObject", "s3:DeleteObjectVersion"}
        ): objects,
        listing: [arn],
    }
    for role in ("RealtimeRole", "FanoutRole", "DrainRole"):
        assert not any(
            a.startswith("s3:") for s in _statements(packaged, role) for a in _actions(s)
        ), role
    for handler in ("api/lambda_handler.handler", "api/sweep_handler.handler"):
        env = _function(packaged, handler)["Environment"]["Variables"]
        assert env["BLOB_BUCKET"] == {"Ref": "BlobBucket"}
        assert "S3_ENDPOINT" not in env  # AWS S3 itself


def _s3(packaged: dict[str, Any], role: str) -> dict[frozenset[str], Any]:
    return {
        frozenset(_actions(s)): s["Resource"]
        for s in _statements(packaged, role)
        if any(a.startswith("s3:") for a in _actions(s))
    }


def test_the_sweep_runs_hourly(packaged: dict[str, Any]) -> None:
    function = _function(packaged, "api/sweep_handler.handler")
    assert function["Timeout"] == 300
    (rule,) = [
        r["Properties"]
        for r in _resources(packaged, "AWS::Events::Rule").values()
        if r["Properties"]["ScheduleExpression"] == "rate(1 hour)"
    ]
    assert rule["State"] == "ENABLED"


def _function(packaged: dict[str, Any], handler: str) -> dict[str, Any]:
    (function,) = [
        f["Properties"]
        for f in _resources(packaged, "AWS::Lambda::Function").values()
        if f["Properties"]["Handler"] == handler
    ]
    return function


def test_the_function_and_its_http_api(packaged: dict[str, Any]) -> None:
    properties = _function(packaged, "api/lambda_handler.handler")
    assert properties["Runtime"] == "python3.13"
    # SnapStart, and the HTTP API invokes the published version (its alias), not $LATEST.
    assert properties["SnapStart"] == {"ApplyOn": "PublishedVersions"}
    (integration,) = [
        i["Properties"]
        for i in _resources(packaged, "AWS::ApiGatewayV2::Integration").values()
        if i["Properties"]["ApiId"] == {"Ref": "HttpApi"}
    ]
    assert integration["IntegrationUri"]["Fn::Join"][1][-1] == "snapstart", integration
    assert properties["Architectures"] == ["arm64"]
    env = properties["Environment"]["Variables"]
    assert env["TABLE_NAME"] == "offline-sync-api-ci"
    assert env["GRAPHIQL"] == "false" and env["INTROSPECTION"] == "false"
    assert env["JWT_ISSUER"].startswith("https://cognito-idp.eu-west-1.amazonaws.com/")
    assert env["JWT_JWKS_URL"] == env["JWT_ISSUER"] + "/.well-known/jwks.json"
    assert env["CURSOR_SECRET"].startswith("{{resolve:ssm:")
    assert env["HEALTH_TOKEN"] == ""  # /healthz's details for nobody until --param sets it
    routes = {
        r["Properties"]["RouteKey"]
        for r in _resources(packaged, "AWS::ApiGatewayV2::Route").values()
        if r["Properties"]["ApiId"] == {"Ref": "HttpApi"}
    }
    assert routes == {
        "POST /graphql",
        "GET /graphql",
        "GET /healthz",
    }
    (stage,) = [
        s
        for s in _resources(packaged, "AWS::ApiGatewayV2::Stage").values()
        if s["Properties"]["ApiId"] == {"Ref": "HttpApi"}
    ]
    throttle = stage["Properties"]["DefaultRouteSettings"]
    assert throttle["ThrottlingRateLimit"] > 0 and throttle["ThrottlingBurstLimit"] > 0
    for logs in _resources(packaged, "AWS::Logs::LogGroup").values():
        assert logs["Properties"]["RetentionInDays"] == 30


def test_the_websocket_api_and_the_stream_handler(packaged: dict[str, Any]) -> None:
    websocket = _function(packaged, "api/realtime/aws.websocket_handler")
    fanout = _function(packaged, "api/realtime/aws.stream_handler")
    for function in (websocket, fanout):
        url = function["Environment"]["Variables"]["WEBSOCKET_MANAGEMENT_URL"]
        assert {"Ref": "WebsocketsApi"} in url["Fn::Join"][1]
    routes = {
        r["Properties"]["RouteKey"]
        for r in _resources(packaged, "AWS::ApiGatewayV2::Route").values()
        if r["Properties"]["ApiId"] == {"Ref": "WebsocketsApi"}
    }
    assert routes == {"$connect", "$disconnect", "$default"}
    mappings = {
        m["Properties"]["EventSourceArn"]["Fn::GetAtt"][0]: m["Properties"]
        for m in _resources(packaged, "AWS::Lambda::EventSourceMapping").values()
    }
    assert set(mappings) == {"SyncTable", "FanoutFailures", "PushFlushes"}
    properties = mappings["SyncTable"]
    assert properties["EventSourceArn"] == {"Fn::GetAtt": ["SyncTable", "StreamArn"]}
    assert properties["StartingPosition"] == "LATEST"
    (pattern,) = properties["FilterCriteria"]["Filters"]
    assert json.loads(pattern["Pattern"]) == {"dynamodb": {"Keys": {"sk": {"S": ["~HEAD"]}}}}
    # A batch that fails is retried in halves, then recorded in the queue, not dropped;
    # the queue is drained by its own function, which reports the messages it failed.
    assert properties["BisectBatchOnFunctionError"] is True
    assert properties["MaximumRetryAttempts"] >= 1
    queue = {"Fn::GetAtt": ["FanoutFailures", "Arn"]}
    assert properties["DestinationConfig"] == {"OnFailure": {"Destination": queue}}
    drain = _function(packaged, "api/realtime/aws.drain_handler")
    assert {"Ref": "WebsocketsApi"} in drain["Environment"]["Variables"][
        "WEBSOCKET_MANAGEMENT_URL"
    ]["Fn::Join"][1]
    drained = mappings["FanoutFailures"]
    assert drained["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    failures = packaged["Resources"]["FanoutFailures"]["Properties"]
    assert failures["MessageRetentionPeriod"] >= 86400  # the stream's 24 hours
    # Silent pushes: the fan-out and the drain put waiting tokens on the push queue,
    # whose own function pushes them and reports the messages it failed.
    for function in (fanout, drain):
        assert function["Environment"]["Variables"]["PUSH_QUEUE_URL"] == {"Ref": "PushFlushes"}
    flush = _function(packaged, "api/realtime/aws.push_flush_handler")
    assert flush["Environment"]["Variables"]["PUSH_QUEUE_URL"] == {"Ref": "PushFlushes"}
    assert mappings["PushFlushes"]["FunctionResponseTypes"] == ["ReportBatchItemFailures"]


def test_every_function_a_device_waits_for_is_invoked_through_its_snapstart_alias(
    packaged: dict[str, Any],
) -> None:
    """SnapStart applies to published versions only: a route or a mapping that invoked
    the function itself would run $LATEST, with no snapshot. The WebSocket routes' one
    integration, API Gateway's permission to invoke it, and the stream's and the
    queue's mappings invoke each function's "snapstart" alias, once it exists."""
    resources = packaged["Resources"]
    aliases = {
        alias["Properties"]["FunctionName"]["Ref"]: name
        for name, alias in _resources(packaged, "AWS::Lambda::Alias").items()
        if alias["Properties"]["Name"] == "snapstart"
    }

    def through_alias(resource: dict[str, Any], target: Any, function: str) -> None:
        assert resources[function]["Properties"]["SnapStart"] == {"ApplyOn": "PublishedVersions"}
        arn = {"Fn::Join": [":", [{"Fn::GetAtt": [function, "Arn"]}, "snapstart"]]}
        assert target == arn, target
        assert aliases[function] in json.dumps(resource.get("DependsOn")), resource

    (name,) = [
        n
        for n, i in _resources(packaged, "AWS::ApiGatewayV2::Integration").items()
        if i["Properties"]["ApiId"] == {"Ref": "WebsocketsApi"}
    ]
    integration = resources[name]
    uri = integration["Properties"]["IntegrationUri"]["Fn::Join"][1]
    through_alias(integration, uri[-2], "RealtimeLambdaFunction")
    routes = [
        r["Properties"]
        for r in _resources(packaged, "AWS::ApiGatewayV2::Route").values()
        if r["Properties"]["ApiId"] == {"Ref": "WebsocketsApi"}
    ]
    assert {r["RouteKey"] for r in routes} == {"$connect", "$disconnect", "$default"}
    assert all({"Ref": name} in r["Target"]["Fn::Join"][1] for r in routes), routes
    (permission,) = [
        p
        for p in _resources(packaged, "AWS::Lambda::Permission").values()
        if p["Properties"]["Principal"] == "apigateway.amazonaws.com"
        and "HttpApi" not in json.dumps(p)
    ]
    through_alias(permission, permission["Properties"]["FunctionName"], "RealtimeLambdaFunction")
    mappings = {
        m["Properties"]["EventSourceArn"]["Fn::GetAtt"][0]: m
        for m in _resources(packaged, "AWS::Lambda::EventSourceMapping").values()
    }
    for source, function in {
        "SyncTable": "FanoutLambdaFunction",
        "FanoutFailures": "DrainLambdaFunction",
    }.items():
        mapping = mappings[source]
        through_alias(mapping, mapping["Properties"]["FunctionName"], function)


def test_the_artifact_holds_the_code_and_its_arm64_dependencies(packaged: dict[str, Any]) -> None:
    with zipfile.ZipFile(PROJECT_ROOT / ".build" / "lambda.zip") as artifact:
        names = set(artifact.namelist())
        (wheel,) = [n for n in names if n.startswith("cryptography-") and n.endswith("/WHEEL")]
        native_tags = artifact.read(wheel).decode()
        header = artifact.read("api/__pycache__/lambda_handler.cpython-313.pyc")[:8]
    assert "api/lambda_handler.py" in names and "api/storage/table.json" in names
    assert "examples/family/catalog.yaml" in names  # the app's data (SYNC_CATALOG_FILE)
    # Bytecode for every module, of the runtime's version (Python ignores another's):
    # Lambda's code directory is read-only, and without it each cold start compiles
    # every module it imports. 3.13's magic number; hash-based and unchecked (PEP 552,
    # flags 0b01): a zip keeps no source times, and the source is never read.
    sources = {n[:-3] for n in names if n.endswith(".py")}
    compiled = {
        n.replace("__pycache__/", "").removesuffix(".cpython-313.pyc")
        for n in names
        if n.endswith(".pyc")
    }
    assert compiled == sources
    assert header[:4] == (3571).to_bytes(2, "little") + b"\r\n"
    assert int.from_bytes(header[4:8], "little") == 0b01
    for package in ("mangum/", "strawberry/", "pynamodb/", "jwt/", "ulid/"):
        assert any(n.startswith(package) for n in names), package
    assert "manylinux2014_aarch64" in native_tags  # built for Lambda's arm64, not this machine
    # Only what production runs: no dev tools, no reference client, no dev server.
    assert not any(n.startswith(("tests/", ".venv/", "scripts/", "sync_client/")) for n in names)
    assert not any(n.startswith(("uvicorn/", "uvloop/", "watchfiles/")) for n in names)


def test_two_builds_of_one_commit_ship_the_same_bytes(packaged: dict[str, Any]) -> None:
    artifact = PROJECT_ROOT / ".build" / "lambda.zip"
    first = hashlib.sha256(artifact.read_bytes()).hexdigest()
    _run([str(PROJECT_ROOT / "scripts" / "package-lambda")], cwd=PROJECT_ROOT)
    assert hashlib.sha256(artifact.read_bytes()).hexdigest() == first


@pytest.fixture(autouse=True, scope="module")
def _close_mangums_event_loop() -> Iterator[None]:
    """Mangum makes the thread's event loop on first call and keeps it, as a Lambda
    process should; a test process closes it, or whoever drops it later warns."""
    yield
    try:
        loop = asyncio.get_event_loop_policy().get_event_loop()
    except RuntimeError:
        return
    if not loop.is_running():
        loop.close()
    asyncio.set_event_loop(None)


def _event(name: str, tenant: str, token: str) -> dict[str, Any]:
    text = (EVENTS / f"{name}.json").read_text()
    event: dict[str, Any] = json.loads(
        text.replace("{{tenant}}", tenant).replace("{{token}}", token)
    )
    return event


def _local(app_client: TestClient, event: dict[str, Any]) -> tuple[int, Any]:
    headers = {k: v for k, v in event["headers"].items() if k in ("authorization", "content-type")}
    response = app_client.post("/graphql", content=event["body"], headers=headers)
    return response.status_code, response.json()


def test_the_lambda_handler_answers_like_the_local_server(
    settings: Settings, app_client: TestClient, tenant: str
) -> None:
    from api.lambda_handler import handler  # reads the environment the tests set

    context = SimpleNamespace(aws_request_id="lambda-test", function_name="api")
    token = bearer([tenant])["Authorization"].split()[1]

    created = handler(_event("mutation", tenant, token), context)
    assert created["statusCode"] == 200
    body = json.loads(created["body"])
    assert body == {
        "extensions": {"release": RELEASE},  # every answer says it (contract 3.11)
        "data": {
            "createPerson": {
                "person": {"id": "from-lambda", "givenName": "Ann", "relationship": "PARENT"},
                "replayed": False,
            }
        },
    }
    assert "x-request-id" in {k.lower() for k in created["headers"]}
    # The same request to the local server is a replay of the Lambda's write: one store.
    status, local = _local(app_client, _event("mutation", tenant, token))
    assert status == 200 and local["data"]["createPerson"]["replayed"] is True

    for name in ("query", "bad_token"):
        response = handler(_event(name, tenant, token), context)
        status, local = _local(app_client, _event(name, tenant, token))
        assert (response["statusCode"], json.loads(response["body"])) == (status, local), name
    bad = json.loads(handler(_event("bad_token", tenant, token), context)["body"])
    assert bad["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED"
    query = json.loads(handler(_event("query", tenant, token), context)["body"])
    assert [i["id"] for i in query["data"]["changes"]["items"]] == ["from-lambda"]


def test_the_lambda_handler_keeps_its_worker_threads_from_one_request_to_the_next(
    settings: Settings,
    tenant: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Mangum runs each request in a `run_until_complete` of its own: anyio's pool
    started a thread for every request and stopped it at its end. The handler's
    pool keeps them, and the calls still run with the request's context (its log
    line, on stdout as its EMF document, counts the DynamoDB calls made in the
    worker thread)."""
    import threading

    from api.lambda_handler import handler

    context = SimpleNamespace(aws_request_id="threads", function_name="api")
    token = bearer([tenant])["Authorization"].split()[1]
    first = handler(_event("query", tenant, token), context)  # the pool's first thread
    assert first["statusCode"] == 200, first
    started: list[str] = []
    start = threading.Thread.start

    def counted(thread: threading.Thread) -> None:
        started.append(thread.name)
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", counted)
    capsys.readouterr()
    for _ in range(10):
        answer = handler(_event("query", tenant, token), context)
        assert answer["statusCode"] == 200 and "errors" not in json.loads(answer["body"])
    # anyio's: 10. The pool starts one more only when the next call comes before the
    # idle thread has said it is idle (ThreadPoolExecutor), and keeps it.
    assert len(started) <= 2, started
    out = capsys.readouterr().out.splitlines()
    lines = [json.loads(line) for line in out if line.startswith('{"_aws"')]
    assert len(lines) == 10
    assert all(line["dynamodbCalls"] >= 1 for line in lines), lines


def test_the_lambda_handlers_startup_is_left_out_of_garbage_collections() -> None:
    """What the import built (the app, its schema) is in no generation a collection
    walks: a full collection of it paused a request for over 100 ms."""
    import gc

    import api.lambda_handler as module

    walked = {id(o) for o in gc.get_objects()}
    assert gc.get_freeze_count() > 10_000
    for built in (module.app, module.handler, module.app.router):
        assert id(built) not in walked, built


def test_startups_garbage_is_collected_before_the_heap_is_frozen() -> None:
    """A cycle left unreachable at startup is freed, not frozen with the heap."""
    import weakref

    from api.app import freeze_startup_heap

    class Node:
        other: object = None

    first, second = Node(), Node()
    first.other, second.other = second, first
    alive = weakref.ref(first)
    del first, second
    freeze_startup_heap()
    assert alive() is None, "startup's garbage was frozen"


def test_the_lambda_handler_returns_compressed_pages_base64_encoded(
    settings: Settings, app_client: TestClient, tenant: str
) -> None:
    import base64
    import gzip

    import brotli

    from api.lambda_handler import handler

    token = bearer([tenant])["Authorization"].split()[1]
    for i in range(30):
        body = {
            "query": "mutation($i: CreatePersonInput!) { createPerson(input: $i) "
            "{ person { id } } }",
            "variables": {"i": {"tenantID": tenant, "person": {"givenName": f"P{i}"}}},
        }
        assert app_client.post("/graphql", json=body, headers=bearer([tenant])).status_code == 200
    for encoding, decompress in (("gzip", gzip.decompress), ("br", brotli.decompress)):
        event = _event("query", tenant, token)
        event["headers"]["accept-encoding"] = encoding
        event["body"] = event["body"].replace("limit: 10", "limit: 100")
        response = handler(event, SimpleNamespace(aws_request_id="gz", function_name="api"))
        assert response["statusCode"] == 200
        assert response["headers"]["content-encoding"] == encoding
        assert response["isBase64Encoded"] is True
        page = json.loads(decompress(base64.b64decode(response["body"])))
        assert len(page["data"]["changes"]["items"]) == 30


def test_an_export_through_the_lambda_handler_downloads_from_s3(
    settings: Settings, app_client: TestClient, tenant: str
) -> None:
    """The handler answers the link, a presigned S3 GET: the file never passes through
    Lambda (whose response is at most 6 MB), and the link needs no token."""
    import gzip

    import httpx2

    from api.lambda_handler import handler

    token = bearer([tenant])["Authorization"].split()[1]
    context = SimpleNamespace(aws_request_id="export", function_name="api")
    assert handler(_event("mutation", tenant, token), context)["statusCode"] == 200
    event = _event("query", tenant, token)
    event["body"] = json.dumps(
        {
            "query": "mutation($t: ID!) { exportTenant(tenantID: $t) { done downloadURL } }",
            "variables": {"t": tenant},
        }
    )
    payload = json.loads(handler(event, context)["body"])["data"]["exportTenant"]
    assert payload["done"]
    assert payload["downloadURL"].startswith(f"{settings.s3_endpoint}/{settings.blob_bucket}/")
    response = httpx2.get(payload["downloadURL"])
    assert response.status_code == 200
    lines = gzip.decompress(response.content).splitlines()
    assert json.loads(lines[1])["entity"]["id"] == "from-lambda"
    assert json.loads(lines[-1])["end"]["entities"] == 1


# The format the Lambda Python runtime gives its root logger's handler
# (awslambdaric's LambdaLoggerHandler): whatever goes through `logging` is prefixed.
_RUNTIME_FORMAT = "[%(levelname)s]\t%(asctime)s.%(msecs)03dZ\t%(aws_request_id)s\t%(message)s"


def test_the_lambda_handler_writes_each_request_as_one_whole_emf_line(
    settings: Settings, tenant: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """CloudWatch extracts EMF only from a log event that is a whole JSON object: the
    request's line goes to stdout as one, never through the runtime's prefixing
    logging handler (captured here in the runtime's format)."""
    from api.lambda_handler import handler

    runtime_log = io.StringIO()
    through_logging = logging.StreamHandler(runtime_log)
    through_logging.setFormatter(logging.Formatter(_RUNTIME_FORMAT))
    through_logging.addFilter(_with_request_id)
    logging.getLogger().addHandler(through_logging)
    try:
        context = SimpleNamespace(aws_request_id="lambda-emf", function_name="api")
        token = bearer([tenant])["Authorization"].split()[1]
        for name in ("mutation", "query", "bad_token"):
            handler(_event(name, tenant, token), context)
    finally:
        logging.getLogger().removeHandler(through_logging)
    stdout = capsys.readouterr().out.splitlines()
    documents = [json.loads(line) for line in stdout if line.startswith("{")]
    assert [(d["rootField"], d["outcome"]) for d in documents] == [
        ("createPerson", "OK"),
        ("changes", "OK"),
        ("changes", "UNAUTHENTICATED"),  # refused by its resolver
    ]
    for document in documents:
        (directive,) = document["_aws"]["CloudWatchMetrics"]
        assert directive["Namespace"] == "OfflineSync"
        assert directive["Dimensions"] == [["rootField", "outcome"], []]
        assert document["Requests"] == [1.0]
    assert '"requestId"' not in runtime_log.getvalue()  # nothing of it went through logging


def _with_request_id(record: logging.LogRecord) -> bool:
    record.aws_request_id = "lambda-emf"
    return True


# The AWS metrics the alarms read, as AWS documents them (namespace -> metric ->
# the dimension names it is published with): "Monitoring WebSocket API execution
# with CloudWatch metrics" and "Monitor CloudWatch metrics for HTTP APIs" (API
# Gateway Developer Guide), "Types of metrics for Lambda functions" (Lambda
# Developer Guide), "DynamoDB Metrics and dimensions", "Available CloudWatch
# metrics for Amazon SQS".
_DOCUMENTED = {
    "AWS/ApiGateway": {
        "5xx": {"ApiId"},
        "4xx": {"ApiId"},
        "Count": {"ApiId"},
        "ExecutionError": {"ApiId", "Stage"},
    },
    "AWS/Lambda": {
        "Errors": {"FunctionName"},
        "Throttles": {"FunctionName"},
        "IteratorAge": {"FunctionName"},
    },
    "AWS/DynamoDB": {"ReadThrottleEvents": {"TableName"}, "WriteThrottleEvents": {"TableName"}},
    "AWS/SQS": {"ApproximateAgeOfOldestMessage": {"QueueName"}},
}


def _alarm_metrics(alarm: dict[str, Any]) -> list[dict[str, Any]]:
    if "MetricName" in alarm:
        return [{k: alarm[k] for k in ("Namespace", "MetricName", "Dimensions") if k in alarm}]
    return [m["MetricStat"]["Metric"] for m in alarm["Metrics"] if "MetricStat" in m]


def _emitted() -> set[tuple[str, frozenset[str]]]:
    """(metric, dimension names) the code's EMF documents carry, for each event that
    can raise an alarm: requests (a 4xx, UNAVAILABLE), the sweep's failure."""
    from api import metrics
    from api.request_log import RequestLog

    out = io.StringIO()
    sink = metrics.Emf(out)
    for status, codes in ((400, ["BAD_USER_INPUT"]), (200, ["UNAVAILABLE"]), (500, [])):
        sink.request(RequestLog("r", codes=codes), status, 1.0)
    sink.add(metrics.SWEEP_FAILURES)
    sink.flush(function="sweep")
    emitted = set()
    for line in out.getvalue().splitlines():
        for directive in json.loads(line)["_aws"]["CloudWatchMetrics"]:
            assert directive["Namespace"] == metrics.NAMESPACE
            for metric_definition in directive["Metrics"]:
                for dims in directive["Dimensions"]:
                    emitted.add((metric_definition["Name"], frozenset(dims)))
    return emitted


def test_each_alarm_reads_a_metric_that_exists(packaged: dict[str, Any]) -> None:
    """An alarm on a metric nobody publishes never fires: the product's are ones
    the code emits with those dimensions; AWS's are documented, with dimensions
    naming this template's resources."""
    alarms = _resources(packaged, "AWS::CloudWatch::Alarm")
    assert len(alarms) >= 10
    emitted = _emitted()
    topic = {"Ref": "AlarmTopic"}
    for name, alarm in alarms.items():
        properties = alarm["Properties"]
        assert properties["AlarmActions"] == [topic] and properties["OKActions"] == [topic], name
        for metric in _alarm_metrics(properties):
            dimensions = {d["Name"]: d["Value"] for d in metric.get("Dimensions", [])}
            if metric["Namespace"] == "OfflineSync":
                assert (metric["MetricName"], frozenset(dimensions)) in emitted, (name, metric)
                continue
            documented = _DOCUMENTED[metric["Namespace"]][metric["MetricName"]]
            assert set(dimensions) == documented, (name, metric)
            for value in dimensions.values():
                if isinstance(value, str):  # the stage
                    assert value == "ci", (name, metric)
                    continue
                target = value.get("Ref") or value["Fn::GetAtt"][0]
                assert target in packaged["Resources"], (name, metric)
    (email,) = _resources(packaged, "AWS::SNS::Subscription").values()
    assert email["Condition"] == "AlarmEmailGiven"  # none until --param alarmEmail
    (dashboard,) = _resources(packaged, "AWS::CloudWatch::Dashboard").values()
    assert dashboard["Properties"]["DashboardBody"]["Fn::Join"][1][0] == '{"widgets":['
