"""The local S3 engine: moto's server, its own process, with two fixes and a store.

moto is pinned in pyproject's dev extra (`moto[server]==5.2.5`), so `scripts/_setup`
installs it with the project; nothing is fetched at run time. Like DynamoDB Local
(`scripts.local_engine`), the process is tied to its Python parent (Linux
`PR_SET_PDEATHSIG`): it dies with the parent even on SIGKILL, no orphan is left.
It runs `scripts/moto_s3.py`: moto's server with its ListObjectVersions fixed (it
copied and kept the whole bucket at every call) and its models' instance lists made
weak. It keeps its objects in memory; given a directory (`scripts/serve`:
`.data/s3/`), it keeps their state there too (`store.bin`) and loads it when it starts
again, so its objects, versions and delete markers survive a restart as they were;
without one (the tests) they are gone when it stops.

Why moto and what it does not check (signatures, expiry, Content-Length, the
SHA-256 checksum): docs/attachments.md.
"""

from __future__ import annotations

import json
import os
import re
import sys
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError

from api.settings import PROJECT_ROOT, Settings
from api.storage.blobs import cors_configuration
from scripts.local_engine import EngineError, EngineProcess

# One request's line in the server's log (werkzeug's, colored by status):
# 127.0.0.1 - - [25/Nov/2026 08:40:53] "HEAD /bucket/key HTTP/1.1" 200 -
_COLOR = rb"(?:\x1b\[[0-9;]*m)*"
_REQUEST = re.compile(rb'"' + _COLOR + rb"([A-Z]+) (\S+) HTTP/[0-9.]+" + _COLOR + rb'" (\d{3})')
# The recording of the engine before its store (moto's recorder): imported once.
LEGACY_RECORDING = "recording.jsonl"


class LocalS3(EngineProcess):
    """One moto server."""

    name = "the S3 engine (moto)"

    def __init__(self, port: int, store: Path | None = None) -> None:
        super().__init__(port)
        self.store = store  # a directory; None: in memory only

    def start(self, timeout: float = 30.0) -> None:
        # Its output goes to a file: the server logs every request (`requests`).
        # Run as a module of the project (cwd), never by path: scripts/ on sys.path
        # would shadow installed modules with its own (serve, bench...).
        args = [sys.executable, "-m", "scripts.moto_s3", "-H", "127.0.0.1", "-p", str(self.port)]
        # moto's server answers every preflight from any origin by default (flask-cors
        # on the whole app), whatever the bucket's CORS, which would hide a missing or
        # wrong rule: off, a preflight is answered from the bucket's rule, as on AWS.
        env = {**os.environ, "MOTO_DISABLE_GLOBAL_CORS": "true"}
        legacy = None
        if self.store is not None:
            args += ["--store", str(self.store)]
            # Loading is part of the start: some 10 s for 50,000 objects on 2 cores
            # (docs/attachments.md); the bound is for a machine far slower.
            timeout = max(timeout, 600.0)
            legacy = self.store / LEGACY_RECORDING
            if legacy.exists() and not (self.store / "store.bin").exists():
                _keep_whole_entries(legacy)
                env["MOTO_RECORDER_FILEPATH"] = str(legacy)
            else:
                legacy = None
        self._launch(args, timeout, cwd=PROJECT_ROOT, env=env)
        if legacy is not None:
            self._import(legacy)

    def _import(self, legacy: Path, timeout: float = 600.0) -> None:
        """Replay the recording of the engine before its store (moto's recorder) into
        the store, once, then rename it. Its deletes by version id name versions the
        replay gives other ids (why the store replaced it): what the blob sweep or a
        tenant's deletion removed by version id then may be back; said on stdout."""
        request = urllib.request.Request(
            f"{self.endpoint}/moto-api/recorder/replay-recording", method="POST", data=b""
        )
        try:
            urllib.request.urlopen(request, timeout=timeout).close()
        except OSError as exc:
            self.stop()
            raise EngineError(
                f"{self.name} could not import {legacy}: {exc}; move the file away to "
                "start with no blobs"
            ) from exc
        legacy.rename(legacy.with_name(legacy.name + ".imported"))
        print(
            f"==> imported {legacy} into the S3 engine's store (renamed *.imported); "
            "objects it deleted by version id (swept blobs, deleted tenants) may be back: "
            "remove the data directory to start clean",
            flush=True,
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
# goes; exports' files expire after 7 days. (moto 5.2.5 stores these rules but never
# applies them: nothing expires.)
LIFECYCLE_RULES = [
    {
        "ID": "expire-replaced-versions",
        "Status": "Enabled",
        "Filter": {"Prefix": ""},
        "NoncurrentVersionExpiration": {"NoncurrentDays": 1},
        "Expiration": {"ExpiredObjectDeleteMarker": True},
    },
    {
        "ID": "expire-exports",
        "Status": "Enabled",
        "Filter": {"Prefix": "exports/"},
        "Expiration": {"Days": 7},
    },
    {
        "ID": "abort-incomplete-multipart-uploads",
        "Status": "Enabled",
        "Filter": {"Prefix": ""},
        "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1},
    },
]


def _keep_whole_entries(recording: Path) -> int:
    """Cut a legacy recording after its last whole entry; how many it holds. An engine
    killed while it wrote left a partial last line, on which moto's replay would fail.
    Each entry is one line (JSON escapes newlines), written under a lock, so only the
    last one can be partial."""
    if not recording.exists():
        return 0
    with recording.open("r+b") as file:
        data = file.read()
        end = data.rfind(b"\n") + 1
        if end < len(data):
            file.truncate(end)
    lines = data[:end].splitlines()
    for number, line in enumerate(lines, 1):
        try:
            json.loads(line)
        except ValueError as exc:
            raise EngineError(
                f"{recording}, line {number}, is not a recorded request ({exc}); move the "
                "file away to start with no blobs"
            ) from exc
    return len(lines)


def ensure_bucket(
    client: Any, bucket: str, region: str, cors_origins: Sequence[str] = Settings.blob_cors_origins
) -> bool:
    """Create the bucket unless it exists, versioned, with serverless.yml's lifecycle
    rules, and with the CORS rule of serverless.yml's bucket for `cors_origins` (none:
    no CORS); True when the bucket was created. Each is set only when it differs: a
    recorded engine (scripts/serve) would record the same PUTs at every start. On AWS
    the bucket is serverless.yml's (encrypted, public access blocked)."""
    created = _create_bucket(client, bucket, region)
    versioning = client.get_bucket_versioning(Bucket=bucket)
    if versioning.get("Status") != "Enabled":
        client.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    try:
        lifecycle = client.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]
    except ClientError as exc:
        if exc.response["Error"]["Code"] != "NoSuchLifecycleConfiguration":
            raise
        lifecycle = []
    if lifecycle != LIFECYCLE_RULES:
        client.put_bucket_lifecycle_configuration(
            Bucket=bucket, LifecycleConfiguration={"Rules": LIFECYCLE_RULES}
        )
    wanted = cors_configuration(cors_origins)["CORSRules"] if cors_origins else []
    try:
        rules = client.get_bucket_cors(Bucket=bucket)["CORSRules"]
    except ClientError as exc:
        if exc.response["Error"]["Code"] != "NoSuchCORSConfiguration":
            raise
        rules = []
    # Compared first: a recorded engine (scripts/serve) would record the same PUT at
    # every start.
    if [_cors_rule(r) for r in rules] != [_cors_rule(r) for r in wanted]:
        if wanted:
            client.put_bucket_cors(Bucket=bucket, CORSConfiguration={"CORSRules": wanted})
        else:
            client.delete_bucket_cors(Bucket=bucket)
    return created


def _cors_rule(rule: dict[str, Any]) -> dict[str, Any]:
    # Compared as sets of values, without the ID that S3 may add.
    return {k: sorted(v) if isinstance(v, list) else v for k, v in rule.items() if k != "ID"}


def _create_bucket(client: Any, bucket: str, region: str) -> bool:
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


# The platform applications of silent pushes on the local engine (moto's SNS, on the
# same port): their names, by platform (SNS's APNS and GCM, which is FCM's).
PUSH_APPLICATIONS = {"APNS": ("sync-local-apns", "APNS"), "FCM": ("sync-local-fcm", "GCM")}


def ensure_push_applications(client: Any) -> dict[str, str]:
    """The local engine's SNS platform applications for APNs and FCM, made unless
    they exist: their ARNs by platform (PUSH_APNS_APPLICATION_ARN's and
    PUSH_FCM_APPLICATION_ARN's). The engine sends nothing to Apple or Google: it keeps
    each message published (what `scripts/serve` logs, what the tests read)."""
    existing = {
        a["PlatformApplicationArn"].rsplit("/", 1)[-1]: a["PlatformApplicationArn"]
        for a in client.list_platform_applications().get("PlatformApplications", [])
    }
    found = {}
    for platform, (name, sns_platform) in PUSH_APPLICATIONS.items():
        arn = existing.get(name)
        if arn is None:
            arn = client.create_platform_application(
                Name=name,
                Platform=sns_platform,
                Attributes={"PlatformCredential": "local", "PlatformPrincipal": "local"},
            )["PlatformApplicationArn"]
        found[platform] = str(arn)
    return found
