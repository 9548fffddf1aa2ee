"""Settings: the only module that reads environment variables.

Every setting has a local default so that `scripts/serve` works with nothing set.
Tests set the environment before calling `Settings.from_env()`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from api.domain.retention import DEFAULT_RETENTION_S

PROJECT_ROOT = Path(__file__).resolve().parent.parent
# The app whose data this API serves when SYNC_CATALOG_FILE is not set: the shipped
# example (docs/evolution.md, "An app's data").
DEFAULT_CATALOG_FILE = PROJECT_ROOT / "examples" / "family" / "catalog.yaml"
DEFAULT_AUTH_SECRET = "dev-secret-change-me"

# DynamoDB Local accepts any credentials; real AWS must never get these.
_LOCAL_DUMMY_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local"}


@dataclass(frozen=True)
class Settings:
    table_name: str = "sync"
    aws_region: str = "us-east-1"
    # None means "AWS itself" (production); a URL means a local or other engine.
    dynamodb_endpoint: str | None = None
    port: int = 8000
    data_dir: Path = PROJECT_ROOT / ".data"
    dynamodb_local_port: int = 8001
    # Signs pagination cursors so that they cannot be forged or moved to another tenant.
    cursor_secret: str = "dev-cursor-secret-change-me"
    graphiql: bool = True
    introspection: bool = True
    # Shifts this server's clock; used by tests to prove ordering does not rely on clocks.
    clock_offset_ms: int = 0
    # Authentication: local HS256 unless a JWKS URL is set (production, e.g. Cognito).
    auth_secret: str = DEFAULT_AUTH_SECRET
    jwt_jwks_url: str | None = None
    jwt_issuer: str | None = None
    jwt_audience: str | None = None
    jwt_tenants_claim: str = "tenants"
    jwt_leeway_seconds: int = 10
    # At most one JWKS refetch per this many seconds for unknown key ids, so that
    # tokens with made-up `kid`s cannot make the server hammer the issuer.
    jwt_jwks_cooldown_seconds: float = 30.0
    # Request limits.
    max_body_bytes: int = 1024 * 1024
    max_query_depth: int = 10
    max_aliases: int = 30
    max_query_tokens: int = 5000
    # Browser origins allowed to call the API (CORS); none by default.
    cors_origins: tuple[str, ...] = ()
    # Responses at least this large are compressed (zstd, brotli or gzip, as accepted).
    compress_min_bytes: int = 1024
    # Realtime (`changesAvailable` over WebSocket) on a long-running server: at most
    # this many connections and subscriptions per process, and subscriptions per
    # connection. A subscription holds one token (about 2 KB with its task).
    ws_max_connections: int = 5000
    # One user's share of a process's sockets and subscriptions (a phone, a tablet and
    # a few browser tabs fit), so that one user cannot take them all.
    ws_max_connections_per_user: int = 20
    ws_max_subscriptions_per_user: int = 100
    ws_max_subscriptions: int = 10000
    ws_max_subscriptions_per_connection: int = 10
    # How long deletions and earlier versions are kept (contract 3.6): a device
    # away longer must sync again from scratch (RESYNC_REQUIRED). Tests use seconds.
    retention_seconds: int = DEFAULT_RETENTION_S
    # Keep each entity's earlier versions (`history`): one more item per update or
    # delete (contract 3.7). Off: nothing is kept and `history` returns nothing.
    history: bool = True
    # Apps declaring an older catalog release are answered UPGRADE_REQUIRED
    # (docs/evolution.md, "Retiring old apps"); 1: every release is served.
    min_client_release: int = 1
    # Several long-running servers on one table: this server's URL as the others reach
    # it (e.g. http://10.0.1.7:8000). Set, one server at a time reads the table's
    # stream, chosen by a lease, and posts head changes to the others
    # (api.realtime.lease); unset, a server with subscribers reads the stream itself,
    # which AWS's advice of two readers a shard allows for two servers.
    realtime_peer_url: str | None = None
    # How long the stream reader's lease lasts unless renewed (renewed every third).
    realtime_lease_s: float = 15.0
    # Attachments (contract 3.10): the bucket of blobs, and its S3 endpoint. None means
    # AWS S3 in `aws_region` (production); a URL means a local engine (scripts/serve
    # and the tests run moto's server on s3_local_port when none is given).
    blob_bucket: str = "sync-blobs"
    # Browser origins allowed to PUT and GET the presigned URLs straight from the local
    # bucket (its CORS, set where scripts/serve and the tests create it); on AWS the
    # bucket's CORS is serverless.yml's (param blobCorsOrigins). Any origin by
    # default: a presigned URL is the credential, CORS only lets a page read the answer.
    blob_cors_origins: tuple[str, ...] = ("*",)
    s3_endpoint: str | None = None
    s3_local_port: int = 8002
    # What one tenant's blobs may take (requestUpload reserves against it; the sweep
    # recounts it): 1 GiB.
    blob_quota_bytes: int = 1024**3
    # `GET /healthz` with `Authorization: Bearer <health_token>` answers what the
    # server runs on (table, bucket, realtime status); without it, or unset, only
    # whether it is healthy.
    health_token: str | None = None
    # Where metrics go (`api.metrics`): "prometheus" (GET /metrics, for the holder of
    # the health token), "emf" (CloudWatch's Embedded Metric Format on stdout) or
    # "off"; unset, a server's is "prometheus", a Lambda function's "emf".
    metrics: str | None = None
    # AWS: the API Gateway Management API of the WebSocket API (set by serverless.yml).
    websocket_management_url: str | None = None
    # Silent pushes (docs/realtime.md, "Silent pushes"): the SNS platform applications'
    # ARNs (unset: that platform is off; both unset: no pushes, and registering a
    # device is refused), SNS's endpoint (None: AWS's in aws_region; scripts/serve and
    # the tests use their local engine's), at most one push per device per window,
    # and the bounds of registered devices per member and per tenant.
    push_apns_application_arn: str | None = None
    push_fcm_application_arn: str | None = None
    sns_endpoint: str | None = None
    push_window_seconds: float = 30.0
    push_devices_per_member: int = 10
    push_devices_per_tenant: int = 200
    # AWS: the SQS queue of tokens waiting for a device's window (set by serverless.yml).
    push_queue_url: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        endpoint = env.get("DYNAMODB_ENDPOINT") or None
        data_dir = env.get("DATA_DIR")
        return cls(
            table_name=env.get("TABLE_NAME", cls.table_name),
            aws_region=env.get("AWS_REGION", cls.aws_region),
            dynamodb_endpoint=endpoint,
            port=int(env.get("PORT", cls.port)),
            data_dir=Path(data_dir).resolve() if data_dir else cls.data_dir,
            dynamodb_local_port=int(env.get("DYNAMODB_LOCAL_PORT", cls.dynamodb_local_port)),
            cursor_secret=env.get("CURSOR_SECRET", cls.cursor_secret),
            graphiql=_flag(env.get("GRAPHIQL"), default=cls.graphiql),
            introspection=_flag(env.get("INTROSPECTION"), default=cls.introspection),
            clock_offset_ms=int(env.get("CLOCK_OFFSET_MS", cls.clock_offset_ms)),
            auth_secret=env.get("SYNC_AUTH_SECRET") or cls.auth_secret,
            jwt_jwks_url=env.get("JWT_JWKS_URL") or None,
            jwt_issuer=env.get("JWT_ISSUER") or None,
            jwt_audience=env.get("JWT_AUDIENCE") or None,
            jwt_tenants_claim=env.get("JWT_TENANTS_CLAIM") or cls.jwt_tenants_claim,
            jwt_leeway_seconds=int(env.get("JWT_LEEWAY_SECONDS", cls.jwt_leeway_seconds)),
            jwt_jwks_cooldown_seconds=float(
                env.get("JWT_JWKS_COOLDOWN_SECONDS", cls.jwt_jwks_cooldown_seconds)
            ),
            max_body_bytes=int(env.get("MAX_BODY_BYTES", cls.max_body_bytes)),
            min_client_release=int(env.get("MIN_CLIENT_RELEASE", cls.min_client_release)),
            max_query_depth=int(env.get("MAX_QUERY_DEPTH", cls.max_query_depth)),
            max_aliases=int(env.get("MAX_ALIASES", cls.max_aliases)),
            max_query_tokens=int(env.get("MAX_QUERY_TOKENS", cls.max_query_tokens)),
            cors_origins=tuple(
                o.strip() for o in env.get("CORS_ORIGINS", "").split(",") if o.strip()
            ),
            compress_min_bytes=int(env.get("COMPRESS_MIN_BYTES", cls.compress_min_bytes)),
            ws_max_connections=int(env.get("WS_MAX_CONNECTIONS", cls.ws_max_connections)),
            ws_max_connections_per_user=int(
                env.get("WS_MAX_CONNECTIONS_PER_USER", cls.ws_max_connections_per_user)
            ),
            ws_max_subscriptions_per_user=int(
                env.get("WS_MAX_SUBSCRIPTIONS_PER_USER", cls.ws_max_subscriptions_per_user)
            ),
            ws_max_subscriptions=int(env.get("WS_MAX_SUBSCRIPTIONS", cls.ws_max_subscriptions)),
            ws_max_subscriptions_per_connection=int(
                env.get(
                    "WS_MAX_SUBSCRIPTIONS_PER_CONNECTION", cls.ws_max_subscriptions_per_connection
                )
            ),
            websocket_management_url=env.get("WEBSOCKET_MANAGEMENT_URL") or None,
            health_token=env.get("HEALTH_TOKEN") or None,
            metrics=env.get("METRICS") or None,
            realtime_peer_url=env.get("REALTIME_PEER_URL") or None,
            realtime_lease_s=float(env.get("REALTIME_LEASE_S", cls.realtime_lease_s)),
            blob_bucket=env.get("BLOB_BUCKET") or cls.blob_bucket,
            blob_cors_origins=tuple(
                o.strip() for o in env.get("BLOB_CORS_ORIGINS", "*").split(",") if o.strip()
            ),
            s3_endpoint=env.get("S3_ENDPOINT") or None,
            s3_local_port=int(env.get("S3_LOCAL_PORT", cls.s3_local_port)),
            blob_quota_bytes=int(env.get("BLOB_QUOTA_BYTES", cls.blob_quota_bytes)),
            retention_seconds=int(env.get("RETENTION_SECONDS", cls.retention_seconds)),
            history=_flag(env.get("HISTORY"), default=cls.history),
            push_queue_url=env.get("PUSH_QUEUE_URL") or None,
            push_apns_application_arn=env.get("PUSH_APNS_APPLICATION_ARN") or None,
            push_fcm_application_arn=env.get("PUSH_FCM_APPLICATION_ARN") or None,
            sns_endpoint=env.get("SNS_ENDPOINT") or None,
            push_window_seconds=float(env.get("PUSH_WINDOW_SECONDS", cls.push_window_seconds)),
            push_devices_per_member=int(
                env.get("PUSH_DEVICES_PER_MEMBER", cls.push_devices_per_member)
            ),
            push_devices_per_tenant=int(
                env.get("PUSH_DEVICES_PER_TENANT", cls.push_devices_per_tenant)
            ),
        )

    def check(self, served_release: int | None = None) -> list[str]:
        """Refuse unsafe combinations; returns warnings to log for merely risky ones.
        `served_release`: the catalog release this process serves (api.domain.catalog)."""
        if served_release is not None and not 1 <= self.min_client_release <= served_release:
            raise ValueError(
                f"MIN_CLIENT_RELEASE must be a release this server serves: 1 to {served_release}"
            )
        if self.jwt_jwks_url and not self.jwt_issuer:
            raise ValueError("JWT_JWKS_URL is set but JWT_ISSUER is not: set the token issuer")
        if self.metrics not in (None, "prometheus", "emf", "off"):
            raise ValueError("METRICS must be prometheus, emf or off")
        if self.realtime_peer_url is not None:
            scheme, _, rest = self.realtime_peer_url.partition("://")
            if scheme not in ("http", "https") or not rest.split("/", 1)[0]:
                raise ValueError(
                    "REALTIME_PEER_URL must be this server's http(s)://host:port as the other "
                    "servers reach it"
                )
            if self.cursor_secret == Settings.cursor_secret or len(self.cursor_secret) < 32:
                raise ValueError(
                    "REALTIME_PEER_URL is set: CURSOR_SECRET signs the pokes between servers, "
                    "so it must be a secret of 32 characters or more, not the default"
                )
        warnings = []
        if not self.jwt_jwks_url and self.auth_secret == DEFAULT_AUTH_SECRET:
            warnings.append(
                "SYNC_AUTH_SECRET is the default development secret: anyone can mint tokens; "
                "set SYNC_AUTH_SECRET, or JWT_JWKS_URL and JWT_ISSUER in production"
            )
        elif not self.jwt_jwks_url and len(self.auth_secret.encode()) < 32:
            warnings.append("SYNC_AUTH_SECRET is shorter than 32 bytes: use a longer secret")
        return warnings

    @property
    def is_local_engine(self) -> bool:
        return self.dynamodb_endpoint is not None and _is_loopback(self.dynamodb_endpoint)

    def dynamodb_client(self, service: str = "dynamodb", config: Any = None) -> Any:
        """A boto3 client of DynamoDB (or of its streams, "dynamodbstreams") at the
        configured endpoint, with the local engine's dummy credentials when local;
        `config`: a botocore Config (timeouts, retries)."""
        import boto3  # here, not at import: the sweep and a socket's $connect need none

        self.apply_local_credentials()
        return boto3.client(
            service, region_name=self.aws_region, endpoint_url=self.dynamodb_endpoint, config=config
        )

    @property
    def s3_verifies_checksums(self) -> bool:
        """Whether the blob store itself refuses bytes whose SHA-256 differs from the
        signed `x-amz-checksum-sha256`: AWS S3 does; the local engine (moto 5.2.5)
        stores the claimed checksum unchecked, so the server hashes the bytes itself
        (docs/attachments.md)."""
        return self.s3_endpoint is None

    def s3_client(self) -> Any:
        """A boto3 client of S3 at the configured endpoint: Signature Version 4 (the
        one that signs `x-amz-checksum-sha256` and `Content-Length` into a presigned
        URL); path-style addressing on a local engine, whose host is an IP address."""
        import boto3
        from botocore.config import Config

        self.apply_local_credentials()
        style = "virtual" if self.s3_endpoint is None else "path"
        return boto3.client(
            "s3",
            region_name=self.aws_region,
            endpoint_url=self.s3_endpoint,
            # A stalled S3 answers UNAVAILABLE within the API's 10 s Lambda timeout,
            # not a timeout of its own: 2 s to connect, 3 s to read, 2 attempts.
            config=Config(
                signature_version="s3v4",
                s3={"addressing_style": style},
                connect_timeout=2,
                read_timeout=3,
                retries={"total_max_attempts": 2, "mode": "standard"},
            ),
        )

    def sns_client(self) -> Any:
        """A boto3 client of SNS (silent pushes) at the configured endpoint: 2 s to
        connect, 3 s to read, 2 attempts, as S3's."""
        import boto3
        from botocore.config import Config

        self.apply_local_credentials()
        return boto3.client(
            "sns",
            region_name=self.aws_region,
            endpoint_url=self.sns_endpoint,
            config=Config(
                connect_timeout=2,
                read_timeout=3,
                retries={"total_max_attempts": 2, "mode": "standard"},
            ),
        )

    @property
    def push_applications(self) -> dict[str, str]:
        """The platform applications configured, by platform (APNS, FCM)."""
        found = {"APNS": self.push_apns_application_arn, "FCM": self.push_fcm_application_arn}
        return {p: arn for p, arn in found.items() if arn}

    def apply_local_credentials(self) -> None:
        """Give boto3 dummy credentials, but only when talking to a local engine."""
        local_s3 = self.s3_endpoint is not None and _is_loopback(self.s3_endpoint)
        local_sns = self.sns_endpoint is not None and _is_loopback(self.sns_endpoint)
        if self.is_local_engine or local_s3 or local_sns:
            for key, value in _LOCAL_DUMMY_CREDENTIALS.items():
                os.environ.setdefault(key, value)


@dataclass(frozen=True)
class CatalogChoice:
    """Which app's catalog this process serves, read once at import by
    api.domain.catalog (the GraphQL schema is built from it at import)."""

    # SYNC_CATALOG_FILE: the app's catalog file (YAML; docs/evolution.md).
    file: Path
    # SYNC_RELEASE (tests only): serve an earlier recorded release beside the newest.
    release: int | None
    # SYNC_CATALOG (tests only): a catalog in Python, `module:attribute`.
    module: str | None


def catalog_choice(env: Mapping[str, str] | None = None) -> CatalogChoice:
    env = os.environ if env is None else env
    file = env.get("SYNC_CATALOG_FILE")
    release = env.get("SYNC_RELEASE")
    return CatalogChoice(
        file=Path(file).resolve() if file else DEFAULT_CATALOG_FILE,
        release=int(release) if release else None,
        module=env.get("SYNC_CATALOG") or None,
    )


def _flag(value: str | None, *, default: bool) -> bool:
    if value is None or value == "":
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def is_loopback(url: str) -> bool:
    """Whether `url` names this machine (a local engine)."""
    return _is_loopback(url)


def _is_loopback(url: str) -> bool:
    host = url.split("://", 1)[-1].split("/", 1)[0].rsplit(":", 1)[0].strip("[]")
    return host in {"localhost", "127.0.0.1", "::1"} or host.startswith("127.")
