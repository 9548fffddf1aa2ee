"""The local S3 engine's server: moto's (`moto.server`), with two fixes and, given a
directory, its state kept on disk so that it survives a restart exactly.

Run by `scripts.local_s3.LocalS3` as `python -m scripts.moto_s3 -H HOST -p PORT
[--store DIR]`. For moto 5.2.5 (pinned in pyproject's dev extra); docs/attachments.md.

The fixes (issue 36, finding 6), applied in memory and on disk alike:

- ListObjectVersions deep-copied every version of the whole bucket, bodies included,
  at each call (to set `is_latest` on the copies), and every copy stayed: moto's models
  keep each instance they ever create in a class list (`instances_tracked`, read only
  by moto's reset and `/moto-api/data.json`). 3,500 objects cost 6.7 s and 23 MB a
  listing; past some 25,000 a listing outlasted the client's 3 s read timeout. Here
  the listing sets `is_latest` on the stored versions themselves (what the copy was
  for; nothing else reads it), copies nothing, sorts only the versions under its
  prefix, and computes their times' sort key without moto's slow conversion.
- Those class lists hold their instances weakly, so a deleted object's memory goes.

The store replaces moto's recorder, which logged requests and replayed them: a replay
gives each version a new id, so every delete by version id it replayed (the blob
sweep's, `deleteTenant`'s) deleted nothing, and deleted data came back. The store
keeps state instead of requests: after each write request (anything but GET, HEAD and
OPTIONS; write requests run one at a time, their bodies read before), it appends the
new state of what the request changed: each object key's whole list of versions and
delete markers (moto's own objects, pickled, so ids, times, checksums and metadata are
kept as they were), each bucket's configuration, each multipart upload and part. At
start it loads the file, then rewrites it with the live state alone (compaction), so
it holds what exists, not what ever happened. A record cut short by a kill is
dropped; any other damage stops the start. The file is tied to moto's version.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import io
import itertools
import os
import pickle
import struct
import sys
import threading
import weakref
import zlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import moto
import moto.s3.models as s3_models
from moto.core.model_instances import model_data
from moto.s3.models import FakeBucket, FakeMultipart, S3Backend, s3_backends
from moto.s3.utils import _VersionedKeyStore

# The file's first record; another format or moto version is refused.
FORMAT = ("local-s3-store", 1, moto.__version__)
STORE_FILE = "store.bin"
_FRAME = struct.Struct(">IQ")  # crc32 of the payload, its length
_READS = frozenset({"GET", "HEAD", "OPTIONS"})


class StoreError(RuntimeError):
    """The store cannot be loaded as it is."""


# The fixes.


class _WeakInstances:
    """What moto's models append each new instance to (`instances_tracked`), holding
    it weakly: a list of every object ever created kept them all alive."""

    def __init__(self) -> None:
        self._items: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
        self._numbers = itertools.count()

    def append(self, item: Any) -> None:
        self._items[next(self._numbers)] = item

    def __iter__(self) -> Iterator[Any]:
        return iter(list(self._items.values()))

    def __len__(self) -> int:
        return len(self._items)


_listing = threading.local()  # the prefix of the listing this thread runs
_EPOCH = datetime.datetime(1970, 1, 1)


class _ListingCopy:
    """Stands for the `copy` module in moto.s3.models, whose one deepcopy is the
    listing's copy of each key's versions: the versions themselves, not copies, and
    none of a key outside the listing's prefix (which the listing skips anyway; keys
    that share a prefix are contiguous in its order, so its markers are unaffected)."""

    copy = staticmethod(copy.copy)

    @staticmethod
    def deepcopy(versions: list[Any]) -> list[Any]:
        if versions and not versions[0].name.startswith(getattr(_listing, "prefix", "")):
            return []
        return list(versions)


def _millis(dt: datetime.datetime | None = None) -> float:
    """moto's `unix_time_millis` for the listing's sort, without its datetime
    arithmetic through `utcfromtimestamp` (2.5 s of a listing of 50,000 versions)."""
    moment = dt or datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
    return (moment - _EPOCH).total_seconds() * 1000.0


def _listing_of_prefix(listing: Callable[..., Any]) -> Callable[..., Any]:
    def list_object_versions(self: Any, bucket_name: str, *args: Any, **kwargs: Any) -> Any:
        _listing.prefix = kwargs.get("prefix", args[3] if len(args) > 3 else "") or ""
        try:
            return listing(self, bucket_name, *args, **kwargs)
        finally:
            _listing.prefix = ""

    list_object_versions._of_prefix = True  # type: ignore[attr-defined]
    return list_object_versions


def patch_moto() -> None:
    """Apply the two fixes (idempotent)."""
    s3_models.copy = _ListingCopy  # type: ignore[assignment]
    s3_models.unix_time_millis = _millis
    if not getattr(S3Backend.list_object_versions, "_of_prefix", False):
        listing = _listing_of_prefix(S3Backend.list_object_versions)
        S3Backend.list_object_versions = listing  # type: ignore[method-assign]
    models: dict[str, Any] = model_data["s3"]
    for model in models.values():
        if not isinstance(model.instances_tracked, _WeakInstances):
            model.instances_tracked = _WeakInstances()


# The store's file: frames of (crc32, length, pickled record).


def _frame(record: tuple[Any, ...]) -> bytes:
    payload = pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL)
    return _FRAME.pack(zlib.crc32(payload), len(payload)) + payload


def read_records(path: Path) -> Iterator[tuple[Any, ...]]:
    """The file's records after its header; a last frame cut short (a kill while it
    was written) is cut off the file."""
    with path.open("r+b") as file:
        data = file.read()
        offset, end = 0, len(data)
        first = True
        while offset < end:
            if end - offset < _FRAME.size:
                break  # a torn frame head
            crc, length = _FRAME.unpack_from(data, offset)
            start = offset + _FRAME.size
            if start + length > end:
                break  # a torn payload
            payload = data[start : start + length]
            if zlib.crc32(payload) != crc:
                if start + length == end:
                    break  # the last frame, torn in place
                raise StoreError(f"{path}: a damaged record at byte {offset}")
            record = pickle.loads(payload)
            if first:
                if record != ("header", *FORMAT):
                    raise StoreError(f"{path} was written by {record[1:]!r}, not {FORMAT!r}")
                first = False
            else:
                yield record
            offset = start + length
        if offset < end:
            file.truncate(offset)


# Where the state is: every S3 backend (account, partition) and its buckets.


def _backends() -> Iterator[tuple[str, str, Any]]:
    for account_id, by_partition in list(s3_backends.items()):
        for partition, backend in list(by_partition.items()):
            yield account_id, partition, backend


def _config(bucket: FakeBucket) -> bytes:
    """The bucket's state but its objects and uploads: versioning, lifecycle, CORS..."""
    state = {k: v for k, v in vars(bucket).items() if k not in ("keys", "multiparts")}
    return pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)


def _upload_state(upload: FakeMultipart) -> dict[str, Any]:
    return {k: v for k, v in vars(upload).items() if k not in ("parts", "partlist")}


class Store:
    """The state of the engine's buckets in one file: loaded at start, compacted, then
    appended to after each write request (`record`), which callers serialize."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / STORE_FILE
        self._file: io.BufferedWriter | None = None
        # What the file says now, to append only what changed.
        self._configs: dict[tuple[str, str, str], bytes] = {}
        self._uploads: dict[tuple[str, str, str, str], tuple[int, dict[int, int]]] = {}

    # Loading.

    def load(self) -> int:
        """Apply the file's records to the (empty) engine; how many objects it holds."""
        if self.path.exists():
            for record in read_records(self.path):
                self._apply(record)
        _dirty.clear()
        return sum(len(b.keys) for _, _, backend in _backends() for b in backend.buckets.values())

    def _apply(self, record: tuple[Any, ...]) -> None:
        kind, account_id, partition, name, *rest = record
        backend = s3_backends[account_id][partition]
        if kind == "bucket":
            region, config = rest
            if name not in backend.buckets:
                backend.create_bucket(name, region)
            vars(backend.buckets[name]).update(pickle.loads(config))
            return
        if kind == "no-bucket":
            if backend.buckets.pop(name, None) is not None:
                s3_backends.bucket_accounts.pop(name, None)
            return
        bucket = backend.buckets[name]
        if kind == "key":
            key, versions = rest
            if versions:
                bucket.keys.setlist(key, pickle.loads(versions))
            else:
                if key in bucket.keys:
                    bucket.keys.pop(key)
        elif kind == "upload":
            upload_id, state = rest
            upload: Any = bucket.multiparts.get(upload_id)
            if upload is None:
                upload = FakeMultipart.__new__(FakeMultipart)
                upload.parts, upload.partlist = {}, []
                bucket.multiparts[upload_id] = upload
            vars(upload).update(pickle.loads(state))
        elif kind == "no-upload":
            bucket.multiparts.pop(rest[0], None)
        elif kind == "part":
            upload_id, number, part = rest
            upload = bucket.multiparts[upload_id]
            upload.parts[number] = pickle.loads(part)
            if number not in upload.partlist:
                upload.partlist = sorted([*upload.partlist, number])
        else:
            raise StoreError(f"{self.path}: an unknown record {kind!r}")

    # Writing.

    def compact(self) -> None:
        """Rewrite the file with the live state alone (atomically), then append to it."""
        if self._file is not None:
            self._file.close()
        self._configs.clear()
        self._uploads.clear()
        temporary = self.path.with_suffix(".tmp")
        with temporary.open("wb") as file:
            file.write(_frame(("header", *FORMAT)))
            for account_id, partition, backend in _backends():
                for bucket in list(backend.buckets.values()):
                    for record in self._bucket_records(account_id, partition, bucket, None):
                        file.write(_frame(record))
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, self.path)
        directory = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
        self._file = self.path.open("ab")

    def record(self, touched: Iterable[tuple[int, str]]) -> None:
        """Append what changed: the keys `touched` (by the id of their bucket's key
        store), every bucket whose configuration or uploads changed, buckets gone."""
        assert self._file is not None
        touched_by_store: dict[int, set[str]] = {}
        for store_id, key in touched:
            touched_by_store.setdefault(store_id, set()).add(key)
        seen: set[tuple[str, str, str]] = set()
        frames: list[bytes] = []
        for account_id, partition, backend in _backends():
            for bucket in list(backend.buckets.values()):
                seen.add((account_id, partition, bucket.name))
                keys = touched_by_store.get(id(bucket.keys), set())
                for record in self._bucket_records(account_id, partition, bucket, keys):
                    frames.append(_frame(record))
        for gone in [b for b in self._configs if b not in seen]:
            del self._configs[gone]
            for upload in [u for u in self._uploads if u[:3] == gone]:
                del self._uploads[upload]
            frames.append(_frame(("no-bucket", *gone)))
        if frames:
            self._file.write(b"".join(frames))
            # Flushed to the OS: survives the engine's kill (not the machine's crash).
            self._file.flush()

    def _bucket_records(
        self, account_id: str, partition: str, bucket: FakeBucket, keys: set[str] | None
    ) -> Iterator[tuple[Any, ...]]:
        """The records of a bucket that differ from the file's (`keys`: the object keys
        to write; None: every one, for a new file)."""
        where = (account_id, partition, bucket.name)
        config = _config(bucket)
        if self._configs.get(where) != config:
            self._configs[where] = config
            yield ("bucket", *where, bucket.region_name, config)
        for key in sorted(bucket.keys) if keys is None else sorted(keys):
            versions = bucket.keys.getlist(key, [])
            if keys is None or versions:
                yield ("key", *where, key, pickle.dumps(versions, pickle.HIGHEST_PROTOCOL))
            else:
                yield ("key", *where, key, b"")
        uploads = dict(bucket.multiparts)
        for upload_id, upload in uploads.items():
            known = self._uploads.get((*where, upload_id))
            parts = {n: id(p) for n, p in upload.parts.items()}
            if known is None or known[0] != id(upload):
                state = pickle.dumps(_upload_state(upload), pickle.HIGHEST_PROTOCOL)
                yield ("upload", *where, upload_id, state)
                known = (id(upload), {})
            for number, part in upload.parts.items():
                if known[1].get(number) != id(part):
                    yield ("part", *where, upload_id, number, pickle.dumps(part, -1))
            self._uploads[(*where, upload_id)] = (id(upload), parts)
        for gone in [u for u in self._uploads if u[:3] == where and u[3] not in uploads]:
            del self._uploads[gone]
            yield ("no-upload", *where, gone[3])


# Which object keys a request changed: every change of a bucket's key store goes
# through these four methods of moto's `_VersionedKeyStore`.

_dirty: set[tuple[int, str]] = set()


def _track_changes() -> None:
    def tracked(method: Callable[..., Any]) -> Callable[..., Any]:
        def change(self: _VersionedKeyStore, key: str, *args: Any) -> Any:
            _dirty.add((id(self), key))
            return method(self, key, *args)

        return change

    for name in ("__setitem__", "setlist", "pop", "__delitem__"):
        method = getattr(_VersionedKeyStore, name)
        if not getattr(method, "_tracked", False):
            change = tracked(method)
            change._tracked = True  # type: ignore[attr-defined]
            setattr(_VersionedKeyStore, name, change)


class StoredWrites:
    """WSGI middleware: runs write requests one at a time, each followed by its
    records in the store; reads go straight through, concurrently."""

    def __init__(self, app: Callable[..., Any], store: Store) -> None:
        self.app = app
        self.store = store
        self._writing = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        if environ.get("REQUEST_METHOD", "GET") in _READS or environ.get(
            "PATH_INFO", ""
        ).startswith("/moto-api/"):
            # (moto's own API changes no bucket: its replay of a legacy recording sends
            # each write again to this server, each recorded then.)
            return self.app(environ, start_response)
        # The body first, outside the lock: a slow upload holds no other write up.
        length = environ.get("CONTENT_LENGTH")
        if length:
            environ["wsgi.input"] = io.BytesIO(environ["wsgi.input"].read(int(length)))
        with self._writing:
            _dirty.clear()
            try:
                answer = self.app(environ, start_response)
                body = b"".join(answer)  # the request is done once its answer is
                if hasattr(answer, "close"):
                    answer.close()
            finally:
                touched = set(_dirty)
                _dirty.clear()
                self.store.record(touched)
        return [body]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, required=True)
    parser.add_argument("--store", type=Path, help="keep the state in this directory")
    args = parser.parse_args(argv)
    os.environ.setdefault("MOTO_PORT", str(args.port))
    patch_moto()
    # Imported after the patch, as moto's own server does (moto.server.main).
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import run_simple

    app: Callable[..., Any] = DomainDispatcherApplication(create_backend_app)
    if args.store is not None:
        store = Store(args.store)
        _track_changes()
        try:
            objects = store.load()
        except (StoreError, OSError, pickle.UnpicklingError, KeyError) as exc:
            print(f"error: cannot load {store.path}: {exc}", file=sys.stderr, flush=True)
            sys.exit(2)
        store.compact()
        print(f"loaded {objects} object keys from {store.path}", flush=True)
        app = StoredWrites(app, store)
    run_simple(args.host, args.port, app, threaded=True, request_handler=MotoRequestHandler)


if __name__ == "__main__":
    main()
