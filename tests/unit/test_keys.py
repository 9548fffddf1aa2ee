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
