"""The local S3 engine's fixes to moto 5.2.5 (scripts/moto_s3.py), in process, and its
store's file format. The engine's own tests (a server, restarts) are in
tests/integration/test_local_s3.py."""

from __future__ import annotations

import gc
import pickle
import uuid
import weakref
from pathlib import Path
from typing import Any

import pytest
from moto.s3.models import FakeKey, s3_backends

from scripts.moto_s3 import FORMAT, StoreError, _frame, patch_moto, read_records


def _bucket() -> tuple[Any, str]:
    patch_moto()
    backend = s3_backends["123456789012"]["aws"]
    name = f"unit-{uuid.uuid4().hex[:12]}"
    backend.create_bucket(name, "us-east-1")
    backend.put_bucket_versioning(name, "Enabled")
    return backend, name


def test_a_version_listing_copies_no_object(monkeypatch: pytest.MonkeyPatch) -> None:
    """moto 5.2.5 deep-copied every version of the bucket, bodies included, at each
    ListObjectVersions: 6.7 s and 23 MB a listing of 3,500 objects (issue 36)."""
    backend, bucket = _bucket()
    for n in range(3):
        backend.put_object(bucket, f"k/{n}", b"x" * 1000)
    backend.put_object(bucket, "k/0", b"a newer version")
    for name in ("j/0", "l/0"):  # outside the prefix, on either side of it
        backend.put_object(bucket, name, b"z")
    copied = []
    getstate = FakeKey.__getstate__

    def counted(self: FakeKey) -> dict[str, Any]:
        copied.append(self.name)
        return getstate(self)

    monkeypatch.setattr(FakeKey, "__getstate__", counted)
    versions, _, _, _, _ = backend.list_object_versions(bucket, prefix="k/")
    assert copied == []
    # What the copies were for: which version is the latest, as S3 says it.
    assert sorted((v.name, v.is_latest) for v in versions) == [
        ("k/0", False),
        ("k/0", True),
        ("k/1", True),
        ("k/2", True),
    ]
    # Pages of two, from the markers each page gives: the same versions, in order.
    paged, key_marker, version_marker = [], None, None
    while True:
        page, _, _, key_marker, version_marker = backend.list_object_versions(
            bucket,
            prefix="k/",
            max_keys=2,
            key_marker=key_marker,
            version_id_marker=version_marker,
        )
        paged += page
        if key_marker is None:
            break
    assert [v.version_id for v in paged] == [v.version_id for v in versions]


def test_a_deleted_object_is_not_kept_by_moto() -> None:
    """moto's models kept every instance they ever created in a class list: an object
    deleted, its versions and the copies of every listing stayed in memory."""
    backend, bucket = _bucket()
    key = backend.put_object(bucket, "gone", b"y" * 1000)
    backend.list_object_versions(bucket)
    version, ref = key.version_id, weakref.ref(key)
    del key
    backend.delete_object(bucket, "gone", version_id=version)
    gc.collect()
    assert ref() is None


def test_a_torn_last_record_is_cut_and_damage_elsewhere_stops_the_load(tmp_path: Path) -> None:
    path = tmp_path / "store.bin"
    records = [("key", "a", "aws", "b", f"k{n}", b"") for n in range(3)]
    whole = _frame(("header", *FORMAT)) + b"".join(_frame(r) for r in records)
    path.write_bytes(whole + _frame(("key", "a", "aws", "b", "torn", b""))[:-3])
    assert list(read_records(path)) == records
    assert path.read_bytes() == whole
    # A record damaged in place, then another: not a kill's doing.
    damaged = bytearray(whole)
    damaged[len(_frame(("header", *FORMAT))) + 20] ^= 0xFF
    path.write_bytes(bytes(damaged))
    with pytest.raises(StoreError, match="damaged"):
        list(read_records(path))
    path.write_bytes(_frame(("header", "local-s3-store", 1, "0.0")) + _frame(records[0]))
    with pytest.raises(StoreError, match="written by"):
        list(read_records(path))
    assert pickle.loads(_frame(records[0])[12:]) == records[0]
