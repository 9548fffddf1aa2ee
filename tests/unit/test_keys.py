"""The key design is a persisted contract: these strings must never change."""

from __future__ import annotations

from api.storage import keys


def test_key_formats() -> None:
    assert keys.tenant_pk("t1") == "T#t1"
    assert keys.log_pk("t1") == "T#t1#LOG"
    assert keys.entity_sk("p1") == "I#p1"
    assert keys.HEAD_SK == "HEAD"


def test_entity_keys_are_told_apart_from_the_head() -> None:
    assert keys.is_entity_sk(keys.entity_sk("HEAD"))
    assert not keys.is_entity_sk(keys.HEAD_SK)
