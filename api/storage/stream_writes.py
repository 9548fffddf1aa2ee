"""One transaction's entries of who sees what (docs/ordering.md, "Who sees what"):
each write's main log entry linked to the previous main entry, its stream entries
put and its previous version's removed, the checks of the previous transaction's
stream entries, and the head's attributes that say all this (models.HeadItem). A
tenant that never had a restricted record writes its head as before."""

from __future__ import annotations

from typing import Any, Literal

from pynamodb.transactions import TransactWrite

from api.domain.chain import NO_MAIN, Streams, split_stream_key, stream_key
from api.domain.mutations import Write
from api.domain.visibility import is_group, member_principal
from api.storage import codecs, keys
from api.storage.models import BlobUsageItem, HeadItem, RecordItem

# What an action is for, as transactions' roles name them, and what it is.
Action = tuple[Literal["chain", "entry", "old entry"], Literal["delete", "put", "update"]]


class StreamWrites:
    def __init__(self, tenant_id: str, head: str | None, streams: Streams) -> None:
        self._tenant_id = tenant_id
        self._head = head
        self._streams = streams
        self._check = frozenset(streams.check)
        self._gone = frozenset(streams.gone)
        # The main log's chain: each main entry links to the previous main entry.
        self._first_main = head if streams.main is None else streams.main
        self._prev_main = None if self._first_main == NO_MAIN else self._first_main
        self._main_tokens: list[str] = []
        self._put: set[str] = set()
        self._removed: set[str] = set()
        self._restricted = streams.restricted

    def main_entry(self, tx: TransactWrite, write: Write) -> bool:
        """Put the write's main log entry (its version, or a LeftView sentinel), if it
        has one; whether it did."""
        record, entries = write.record, write.entries
        self._restricted |= bool(entries.streams) or record.visibility is not None
        if entries.main is None:
            return False
        left = entries.main == "left"
        tx.save(codecs.log_item(record, self._prev_main, write.expires_at, left))
        self._prev_main = record.change_token
        self._main_tokens.append(record.change_token)
        return True

    def stream_entries(self, tx: TransactWrite, write: Write) -> list[Action]:
        """Remove the previous version's stream entries (the chain's check riding on
        the delete of one the previous transaction put) and put the write's."""
        record, entries, expected = write.record, write.entries, write.expected_token
        actions: list[Action] = []
        expires = write.expires_at or 0  # (set when it supersedes: `Entries.supersedes`)
        for principal in entries.streams_removed:
            assert expected is not None
            key = stream_key(expected, principal)
            # One action per item: the chain's check rides on this delete (a stale
            # write's delete of an entry the previous transaction removed: absent).
            condition = (
                RecordItem.sk.exists()
                if key in self._check
                else RecordItem.sk.does_not_exist()
                if key in self._gone
                else None
            )
            item = RecordItem(keys.stream_pk(self._tenant_id, principal), expected)
            if is_group(principal):
                # A group's entry is superseded in place, not removed (one item: a
                # Query returns it in one state or the other, never neither).
                condition = _gone(key) if key in self._gone else RecordItem.sk.exists()
                actions_: list[Any] = [
                    RecordItem.superseded.set(record.change_token),
                    RecordItem.expires.set(expires),
                    RecordItem.fields.remove(),
                ]
                tx.update(item, actions=actions_, condition=condition)
                checked = key in self._check or key in self._gone
                actions.append(("chain" if checked else "old entry", "update"))
            else:
                tx.delete(item, condition=condition)
                actions.append(("chain" if condition is not None else "old entry", "delete"))
            self._removed.add(key)
        for principal, what in entries.streams.items():
            left = what == "left"
            tx.save(codecs.stream_item(record, principal, write.expires_at, left))
            actions.append(("entry", "put"))
            self._put.add(stream_key(record.change_token, principal))
        if write.entries.marker and write.member is not None and self._restricted:
            # A join or a leave: its marker in its member's stream, where a sync of
            # the member reads it even once a later write replaced the version's main
            # entry (docs/ordering.md, "Groups"). Checked by the next transaction.
            principal = member_principal(write.member[0])
            tx.save(codecs.marker_item(record, principal, write.expires_at))
            actions.append(("entry", "put"))
            self._put.add(stream_key(record.change_token, principal))
        return actions

    def checks(self, tx: TransactWrite) -> int:
        """ConditionChecks of the previous transaction's stream entries: those it put
        exist (but those this one removes, checked on their delete), those it removed
        do not; how many."""
        count = 0
        for key in sorted(self._check - self._removed):
            self._condition_check(tx, key, RecordItem.sk.exists())
            count += 1
        for key in sorted(self._gone - self._removed):
            self._condition_check(tx, key, _gone(key))
            count += 1
        return count

    def _condition_check(self, tx: TransactWrite, key: str, condition: Any) -> None:
        token, principal = split_stream_key(key)
        pk = keys.stream_pk(self._tenant_id, principal)
        tx.condition_check(RecordItem, pk, token, condition=condition)

    def usage_flag(self, tx: TransactWrite) -> bool:
        """Set the tenant's flag on its blob usage item (making the item if need be)
        in the transaction that first sets the head's: a tenant that never had a
        restricted record writes nothing more. One item, which `Link.checked_items`
        holds room for in a transaction that may be the first. Whether it did."""
        if not self._restricted or self._streams.restricted:
            return False
        usage = BlobUsageItem(keys.blobs_pk(self._tenant_id), keys.USAGE_SK)
        tx.update(usage, actions=[BlobUsageItem.restricted.set(True)])
        return True

    def head_actions(self, last: str, entries: int) -> list[Any]:
        """The head's attributes of who sees what; none for a tenant that never had a
        restricted record (its head is written as before)."""
        if not self._restricted:
            return []
        mains, first_main = HeadItem.main_tokens, self._first_main
        return [
            HeadItem.restricted.set(True),
            mains.remove()
            if len(self._main_tokens) == entries
            else mains.set(set(self._main_tokens) or {NO_MAIN}),
            HeadItem.last_main.remove()
            if self._prev_main == last
            else HeadItem.last_main.set(self._prev_main or NO_MAIN),
            HeadItem.prev_main.remove()
            if first_main == self._head or first_main is None
            else HeadItem.prev_main.set(first_main),
            HeadItem.stream_put.set(self._put) if self._put else HeadItem.stream_put.remove(),
            HeadItem.stream_removed.set(self._removed)
            if self._removed
            else HeadItem.stream_removed.remove(),
        ]


def _gone(key: str) -> Any:
    """The condition that the stream entry `key` was removed: absent, or for a group's
    entry superseded."""
    if is_group(split_stream_key(key)[1]):
        return RecordItem.superseded.exists()
    return RecordItem.sk.does_not_exist()
