"""The streams of who sees what (docs/ordering.md, "Who sees what"): a principal's
entries read in token order, and the check by consistent reads that a transaction's
stream entries are applied (when the next transaction cannot check them in itself)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from api.domain.chain import split_stream_key, stream_key
from api.domain.records import Record
from api.storage import codecs, keys, reads
from api.storage.models import RecordItem

_SUPERSEDED = RecordItem.superseded.attr_name
_BATCH_GET_KEYS = 100


def entries_applied(tenant_id: str, present: Collection[str], gone: Collection[str]) -> bool:
    """Whether the stream entries `present` (`keys.stream_key`) exist and those `gone`
    do not, by consistent reads: once seen so, every later read sees them so
    (docs/ordering.md, P1), as a transaction's check would have proven."""
    wanted = [*present, *gone]
    found: set[str] = set()
    for start in range(0, len(wanted), _BATCH_GET_KEYS):
        batch = wanted[start : start + _BATCH_GET_KEYS]
        pending = [_raw_key(tenant_id, key) for key in batch]
        for raw in reads.batch_get_keys(pending):
            if _SUPERSEDED in raw and raw[_SUPERSEDED]["S"] != codecs.sort_key(raw):
                # A group's entry superseded: removed, as far as the chain goes (a
                # marker of a join or a leave is superseded by itself: present).
                continue
            principal = raw[codecs.PK]["S"][len(keys.stream_pk(tenant_id, "")) :]
            found.add(stream_key(codecs.sort_key(raw), principal))
    return set(present) <= found and not (set(gone) & found)


def stream_range(
    tenant_id: str, principal: str, after: str | None, upper: str, limit: int
) -> tuple[list[Record], bool]:
    """`principal`'s stream entries with after < token <= upper, ascending (one
    consistent Query, more only past DynamoDB's 1 MB page); and whether more follow."""
    return reads.log_range(tenant_id, after, upper, limit, pk=keys.stream_pk(tenant_id, principal))


def _raw_key(tenant_id: str, key: str) -> dict[str, Any]:
    token, principal = split_stream_key(key)
    return codecs.raw_key(keys.stream_pk(tenant_id, principal), token)
