"""The local S3 engine: moto's server (`python -m moto.server`), its own process.

moto is pinned in pyproject's dev extra (`moto[server]==5.2.5`), so `scripts/_setup`
installs it with the project; nothing is fetched at run time. Like DynamoDB Local
(`scripts.local_engine`), the process is tied to its Python parent (Linux
`PR_SET_PDEATHSIG`): it dies with the parent even on SIGKILL, no orphan is left.
It keeps its objects in memory: they are gone when it stops.

Why moto and what it does not check (signatures, expiry, Content-Length, the
SHA-256 checksum): docs/attachments.md.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from typing import IO, Any

from botocore.exceptions import ClientError

from scripts.local_engine import EngineError, _answers, _die_with_parent, stop_process

# One request's line in the server's log (werkzeug's, colored by status):
# 127.0.0.1 - - [25/Nov/2026 08:40:53] "HEAD /bucket/key HTTP/1.1" 200 -
_COLOR = rb"(?:\x1b\[[0-9;]*m)*"
_REQUEST = re.compile(rb'"' + _COLOR + rb"([A-Z]+) (\S+) HTTP/[0-9.]+" + _COLOR + rb'" (\d{3})')


class LocalS3:
    """One moto server. Use as a context manager."""

    def __init__(self, port: int) -> None:
        self.port = port
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def start(self, timeout: float = 30.0) -> None:
        # A file, not a pipe: the server logs every request, and must never block.
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 - closed in stop()
        self._process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                code, output = self._process.returncode, self._output()
                self.stop()
                raise EngineError(f"the S3 engine (moto) exited with code {code}: {output}")
            if _answers(self.endpoint):
                return
            time.sleep(0.1)
        self.stop()
        raise EngineError(f"the S3 engine (moto) did not answer on {self.endpoint}")

    def requests(self) -> list[tuple[str, str, int]]:
        """Every request the engine has answered so far, in order: (method, path with
        its query, status), from its log. werkzeug writes a request's line as it sends
        the response's status, so a request whose answer the caller holds is listed."""
        if self._log is None:
            return []
        fd = self._log.fileno()
        # pread: the server writes through the same open file, whose offset a seek
        # would move under it.
        text = os.pread(fd, os.fstat(fd).st_size, 0)
        return [(m[1].decode(), m[2].decode(), int(m[3])) for m in _REQUEST.finditer(text)]

    def _output(self) -> str:
        if self._log is None:
            return ""
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-2000:]

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            stop_process(process)
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> LocalS3:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def ensure_bucket(client: Any, bucket: str, region: str) -> bool:
    """Create the bucket unless it exists; True when it was created. On AWS the bucket
    is serverless.yml's (encrypted, public access blocked, lifecycle rules)."""
    try:
        client.head_bucket(Bucket=bucket)
        return False
    except ClientError as exc:
        if exc.response["Error"]["Code"] not in ("404", "NoSuchBucket"):
            raise
    # us-east-1 is the one region where S3 refuses an explicit LocationConstraint (and
    # where creating a bucket one already owns succeeds: hence the HeadBucket first).
    if region == "us-east-1":
        client.create_bucket(Bucket=bucket)
    else:
        client.create_bucket(
            Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": region}
        )
    return True
