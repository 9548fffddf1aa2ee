"""The key design is a persisted contract: these strings must never change."""

from __future__ import annotations

from api.storage import keys


def test_key_formats() -> None:
    assert keys.tenant_pk("t1") == "T#t1"
    assert keys.log_pk("t1") == "T#t1#LOG"
    assert keys.entity_sk("p1") == "I#p1"
    assert keys.HEAD_SK == "~HEAD"


def test_entity_keys_are_told_apart_from_the_head() -> None:
    assert keys.is_entity_sk(keys.entity_sk("HEAD"))
    assert not keys.is_entity_sk(keys.HEAD_SK)


def test_the_head_sorts_above_every_change_token() -> None:
    # DynamoDB orders string sort keys by their UTF-8 bytes; a descending Query of
    # the log partition must read the head before any entry.
    greatest_token = "7" + "Z" * 25
    assert keys.HEAD_SK.encode() > greatest_token.encode()


def test_s3_keys_and_a_tenants_prefixes() -> None:
    assert keys.blob_key("t1", "ab") == "tenants/t1/blobs/ab"
    assert keys.export_key("t1", "01J") == "exports/t1/01J.jsonl.gz"
    assert keys.tenant_prefixes("t1") == ("tenants/t1/", "exports/t1/")
    # Every S3 key of a tenant is under one of its prefixes, and under none of
    # another tenant's, even one whose id starts with this one's.
    for key in (keys.blob_key("t1", "ab"), keys.export_key("t1", "01J")):
        assert sum(key.startswith(p) for p in keys.tenant_prefixes("t1")) == 1
        assert not any(key.startswith(p) for p in keys.tenant_prefixes("t"))
        assert not any(key.startswith(p) for p in keys.tenant_prefixes("t10"))
