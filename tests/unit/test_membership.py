"""Membership as data's rules (contract 6) over the in-memory store: who may write a
Member record, the move, the guard; against DynamoDB Local in
tests/integration/test_members.py."""

from __future__ import annotations

from typing import Any

import pytest

from api.domain.cursor import CursorCodec
from api.domain.errors import BadUserInput, NotAMember, RoleForbidden
from api.domain.membership import OWNER, READER, WRITER, Access, Caller, member_write_refusal
from api.domain.mutations import Mutation, State, Verb
from api.service import PushStatus, SyncService
from tests.support.family import MEMBER, PERSON
from tests.support.memory_store import MemoryStore

T = "family1"


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore()


@pytest.fixture
def service(store: MemoryStore) -> SyncService:
    return SyncService(store, CursorCodec("unit-secret"))


def _member(verb: Verb, sub: str, fields: dict[str, Any], token: str | None = None) -> Mutation:
    return Mutation(verb, MEMBER, T, sub, token, fields)


@pytest.mark.parametrize(
    "caller, moved, member, role, exists, refused",
    [
        (None, False, "olga", OWNER, False, True),  # no caller known: refused
        (Caller("olga", WRITER), True, "bob", READER, False, True),  # only owners
        (Caller("olga", OWNER), False, "olga", OWNER, False, False),  # the move
        (Caller("olga", OWNER), False, "bob", OWNER, False, True),  # not its own first
        (Caller("olga", OWNER), False, "olga", WRITER, False, True),  # not as owner
        (Caller("olga", OWNER), True, "bob", READER, False, False),
        (Caller("olga", OWNER), True, "olga", None, True, True),  # its own removal
        (Caller("olga", OWNER), True, "olga", READER, True, True),  # its own demotion
        (Caller("olga", OWNER), True, "pat", None, True, False),  # another owner's removal
    ],
)
def test_who_may_write_a_member_record(
    caller: Caller | None, moved: bool, member: str, role: str | None, exists: bool, refused: bool
) -> None:
    refusal = member_write_refusal(caller, moved, member, role, exists)
    assert (refusal is not None) == refused
    assert refusal is None or isinstance(refusal, RoleForbidden)


def test_access_decides_in_a_moved_tenant_and_the_claim_in_a_claim_tenant() -> None:
    def claimed() -> str:
        return WRITER

    assert Access().role_of(claimed) == WRITER
    assert Access(moved=True, role=READER).role_of(claimed) == READER
    with pytest.raises(NotAMember):
        Access(moved=True).role_of(claimed)


def test_a_member_record_needs_its_id_and_role(service: SyncService) -> None:
    for mutation in (
        Mutation("create", MEMBER, T, None, None, {"role": "OWNER"}),
        _member("create", "olga", {}),
        _member("create", "olga", {"role": None}),
        Mutation("put", MEMBER, T, "olga", state=State({"displayName": "O"})),
    ):
        with pytest.raises(BadUserInput):
            service.apply(mutation, "olga", OWNER)
    assert service.access(T, "olga") == Access()


def test_a_claim_owners_push_moves_the_tenant_then_adds_its_members(
    service: SyncService, store: MemoryStore
) -> None:
    mutations = [
        Mutation("create", PERSON, T, None, None, {"givenName": "Ann"}),
        _member("create", "olga", {"role": "OWNER"}),
        _member("create", "bob", {"role": "WRITER"}),
        _member("create", "eve", {"role": "READER"}),
    ]
    results = service.push(T, mutations, "olga", role=OWNER)
    assert [r.status for r in results] == [PushStatus.APPLIED] * 4
    # The move ends its transaction (Ann's and Olga's): the members after it are written
    # as a moved tenant's, their transaction checking that its writer is still an owner.
    head = store.head(T)
    assert head is not None and head.entries == 2  # bob's and eve's, after the move's
    assert service.access(T, "bob") == Access(True, WRITER)
    assert service.access(T, "zed") == Access(True, None)


def test_a_writer_s_member_entry_is_refused_alone(service: SyncService) -> None:
    service.apply(_member("create", "olga", {"role": "OWNER"}), "olga", OWNER)
    mutations = [
        Mutation("create", PERSON, T, None, None, {}),
        _member("create", "eve", {"role": "OWNER"}),
    ]
    results = service.push(T, mutations, "bob", role=WRITER, moved=True)
    assert [r.status for r in results] == [PushStatus.APPLIED, PushStatus.REJECTED]
    assert isinstance(results[1].error, RoleForbidden)


def test_a_stale_owners_member_write_fails_its_guard(service: SyncService) -> None:
    olga = service.apply(_member("create", "olga", {"role": "OWNER"}), "olga", OWNER)
    pat = service.apply(_member("create", "pat", {"role": "OWNER"}), "olga", OWNER, True)
    service.apply(_member("delete", "pat", {}, pat.record.change_token), "olga", OWNER, True)
    removal = _member("delete", "olga", {}, olga.record.change_token)
    with pytest.raises(RoleForbidden):  # pat's request found it an owner; no longer
        service.apply(removal, "pat", OWNER, moved=True)
    assert service.access(T, "olga") == Access(True, OWNER)


def test_a_second_move_loses_to_the_first(service: SyncService) -> None:
    service.apply(_member("create", "olga", {"role": "OWNER"}), "olga", OWNER)
    with pytest.raises(NotAMember):  # carol's request found a claim tenant
        service.apply(_member("create", "carol", {"role": "OWNER"}), "carol", OWNER)
