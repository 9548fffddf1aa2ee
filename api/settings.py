"""Settings: the only module that reads environment variables.

Every setting has a local default so that `scripts/serve` works with nothing set.
Tests set the environment before calling `Settings.from_env()`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent

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
    # Shifts this server's clock; used by tests to prove ordering does not rely on clocks.
    clock_offset_ms: int = 0

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
            clock_offset_ms=int(env.get("CLOCK_OFFSET_MS", cls.clock_offset_ms)),
        )

    @property
    def is_local_engine(self) -> bool:
        return self.dynamodb_endpoint is not None and _is_loopback(self.dynamodb_endpoint)

    def apply_local_credentials(self) -> None:
        """Give boto3 dummy credentials, but only when talking to a local engine."""
        if self.is_local_engine:
            for key, value in _LOCAL_DUMMY_CREDENTIALS.items():
                os.environ.setdefault(key, value)


def _flag(value: str | None, *, default: bool) -> bool:
    if value is None or value == "":
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def _is_loopback(url: str) -> bool:
    host = url.split("://", 1)[-1].split("/", 1)[0].rsplit(":", 1)[0].strip("[]")
    return host in {"localhost", "127.0.0.1", "::1"} or host.startswith("127.")
