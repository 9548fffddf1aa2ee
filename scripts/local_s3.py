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
import sys
from typing import Any

from botocore.exceptions import ClientError

from scripts.local_engine import EngineProcess

# One request's line in the server's log (werkzeug's, colored by status):
# 127.0.0.1 - - [25/Nov/2026 08:40:53] "HEAD /bucket/key HTTP/1.1" 200 -
_COLOR = rb"(?:\x1b\[[0-9;]*m)*"
_REQUEST = re.compile(rb'"' + _COLOR + rb"([A-Z]+) (\S+) HTTP/[0-9.]+" + _COLOR + rb'" (\d{3})')


class LocalS3(EngineProcess):
    """One moto server."""

    name = "the S3 engine (moto)"

    def start(self, timeout: float = 30.0) -> None:
        # Its output goes to a file: the server logs every request (`requests`).
        self._launch(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            timeout,
        )

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


# As serverless.yml's bucket: versioned (the sweep of unreferenced blobs marks a blob
# with a new version and deletes that version, docs/attachments.md), earlier
# versions expire a day after they are replaced, and a delete marker left alone
# goes. (moto 5.2.5 stores these rules but never applies them: nothing expires.)
LIFECYCLE_RULES = [
    {
        "ID": "expire-replaced-versions",
        "Status": "Enabled",
        "Filter": {"Prefix": "tenants/"},
        "NoncurrentVersionExpiration": {"NoncurrentDays": 1},
        "Expiration": {"ExpiredObjectDeleteMarker": True},
    },
    {
        "ID": "abort-incomplete-multipart-uploads",
        "Status": "Enabled",
        "Filter": {"Prefix": ""},
        "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1},
    },
]


def ensure_bucket(client: Any, bucket: str, region: str) -> bool:
    """Create the bucket unless it exists, versioned and with serverless.yml's
    lifecycle rules; True when it was created. On AWS the bucket is serverless.yml's
    (encrypted, public access blocked)."""
    created = _create(client, bucket, region)
    client.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    client.put_bucket_lifecycle_configuration(
        Bucket=bucket, LifecycleConfiguration={"Rules": LIFECYCLE_RULES}
    )
    return created


def _create(client: Any, bucket: str, region: str) -> bool:
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
