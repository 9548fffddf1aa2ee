"""PynamoDB models of the single table. The key design is in `api.storage.keys`.

Attribute names are short because every byte of a log entry is paid for on
every sync that reads it. `updatedAt` is not stored: it is the time of the
item's change token.
"""

from __future__ import annotations

from pynamodb.attributes import (
    BooleanAttribute,
    ListAttribute,
    MapAttribute,
    NumberAttribute,
    UnicodeAttribute,
    UnicodeSetAttribute,
)
from pynamodb.models import Model

from api.settings import Settings
from api.storage import json_items
from api.storage.keys import DELETING_ATTRIBUTE, FENCE_ATTRIBUTE, TTL_ATTRIBUTE


class _TableMeta:
    table_name = "sync"
    region = "us-east-1"
    host: str | None = None
    connect_timeout_seconds = 2
    read_timeout_seconds = 5
    max_retry_attempts = 2


class HeadItem(Model):
    """Per tenant: the chain's end. The last token of the latest transaction, the
    token before that transaction, and how many log entries it wrote."""

    class Meta(_TableMeta):
        pass

    pk = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    token = UnicodeAttribute(attr_name="tok")
    prev = UnicodeAttribute(attr_name="pv", null=True)  # absent after a tenant's first write
    entries = NumberAttribute(attr_name="n", null=True)  # absent: 1
    # The log entries its writes replaced (absent: none), checked gone by the next.
    removed = UnicodeSetAttribute(attr_name="dx", null=True)
    # The tenant's first token: a `since` below it is from before a deletion.
    born = UnicodeAttribute(attr_name="b", null=True)
    # The later copies the transaction put and removed (their sort keys): the next
    # transaction checks them as it checks the log entries (docs/ordering.md).
    later_put = UnicodeSetAttribute(attr_name="lc", null=True)
    later_removed = UnicodeSetAttribute(attr_name="lx", null=True)
    # The device whose write this transaction is (its X-Device-ID; absent: none
    # named): the stream's silent pushes skip it (api.realtime.push_fanout).
    device = UnicodeAttribute(attr_name="dv", null=True)
    # The token of the latest transaction written with copies, set by each one whose
    # tenant has them all: equal to `tok` while every transaction since the tenant's
    # first kept them. A server of an earlier build, which writes none, moves `tok`
    # and leaves this behind, for good (absent: a tenant from before copies were
    # kept). Either way its catch-ups read the log (docs/evolution.md).
    copies = UnicodeAttribute(attr_name="cp", null=True)
    # While the tenant is being deleted (`api.storage.tenants`): who asked, when
    # (epoch ms), how many items are removed so far. No write commits meanwhile.
    deleting_by = UnicodeAttribute(attr_name=DELETING_ATTRIBUTE, null=True)
    deleting_at = NumberAttribute(attr_name="xat", null=True)
    removed_items = NumberAttribute(attr_name="xn", null=True)
    # Who sees what (docs/ordering.md, "Who sees what"): the tenant has (had) a
    # restricted record, so its syncs read the caller's stream too (absent: never).
    restricted = BooleanAttribute(attr_name="vis", null=True)
    # The last token with a main log entry, at or below `tok` (absent: `tok`), and the
    # last one before this transaction (absent: `pv`); this transaction's tokens that
    # have a main entry (absent: all); the stream entries it put and removed, each
    # `<token>#<principal>` (absent: none): the next transaction checks them.
    last_main = UnicodeAttribute(attr_name="lm", null=True)
    prev_main = UnicodeAttribute(attr_name="pm", null=True)
    main_tokens = UnicodeSetAttribute(attr_name="mt", null=True)
    stream_put = UnicodeSetAttribute(attr_name="vp", null=True)
    stream_removed = UnicodeSetAttribute(attr_name="vx", null=True)


class FenceItem(Model):
    """Per tenant id: the highest token it ever had, raised by each deletion's last call
    (`api.storage.tenants`); the tenant's first transaction checks it is below."""

    class Meta(_TableMeta):
        pass

    pk = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    token = UnicodeAttribute(attr_name=FENCE_ATTRIBUTE)


class RecordItem(Model):
    """An entity's latest version; stored twice, as the entity item and as its log entry."""

    class Meta(_TableMeta):
        pass

    pk = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    type = UnicodeAttribute(attr_name="ty")  # ItemType.code, e.g. PERSON
    id = UnicodeAttribute()
    token = UnicodeAttribute(attr_name="tok")
    created_ms = NumberAttribute(attr_name="ca")
    deleted = BooleanAttribute(attr_name="del", null=True)
    fields = MapAttribute(attr_name="f", null=True)  # type: ignore[var-annotated]
    # Log entries only: the head's token this write replaced (its link in the chain).
    prev = UnicodeAttribute(attr_name="pv", null=True)
    # The `sub` of the caller who wrote this version.
    written_by = UnicodeAttribute(attr_name="by", null=True)
    # The release its entity's copy is filed under (absent: a deletion, or written
    # before copies were kept), so that any server's next write removes that copy.
    copy_release = NumberAttribute(attr_name="lr", null=True)
    # A deletion's log entry and an earlier version: when DynamoDB's TTL may delete it.
    expires = NumberAttribute(attr_name=TTL_ATTRIBUTE, null=True)
    # Its owner's sub (absent: written before owners were kept); the members it is
    # shared with besides its owner (absent: tenant-wide; empty: private); a LeftView
    # sentinel's mark (the record left the reader's view here; no fields).
    owner = UnicodeAttribute(attr_name="ow", null=True)
    shared = ListAttribute(of=UnicodeAttribute, attr_name="vw", null=True)
    # The groups it is shared with (absent: none).
    groups = ListAttribute(of=UnicodeAttribute, attr_name="vg", null=True)
    left_view = BooleanAttribute(attr_name="lv", null=True)
    # An entry of a group's stream superseded by a later write: that write's token.
    superseded = UnicodeAttribute(attr_name="sup", null=True)


class OutcomeItem(Model):
    """The first outcome of a clientMutationID, kept until `expires` (DynamoDB TTL)."""

    class Meta(_TableMeta):
        pass

    pk = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    fingerprint = UnicodeAttribute(attr_name="fp")
    outcome = UnicodeAttribute(attr_name="out")
    expires = NumberAttribute(attr_name=TTL_ATTRIBUTE)


class MemberItem(Model):
    """A live member's access (U#<sub>: its role, its groups and its Member record's
    token), or the tenant's marker of membership as data (V, no attributes)."""

    class Meta(_TableMeta):
        pass

    pk = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    role = UnicodeAttribute(null=True)
    groups = ListAttribute(of=UnicodeAttribute, attr_name="gr", null=True)
    # The groups it joined or left within the retention: group -> that change's token.
    changed = MapAttribute(attr_name="gt", null=True)  # type: ignore[var-annotated]
    token = UnicodeAttribute(attr_name="tok", null=True)


class BlobUsageItem(Model):
    """A tenant's blob usage item (`api.storage.blob_usage` reads and writes it raw),
    modelled for a commit's one write to it: the flag that the tenant has (had) a
    restricted record, set in the transaction that sets the head's (`restricted`),
    so that attachments learn it from the item they read anyway."""

    class Meta(_TableMeta):
        pass

    pk = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    restricted = BooleanAttribute(attr_name="vis", null=True)


MODELS: tuple[type[Model], ...] = (
    HeadItem,
    RecordItem,
    OutcomeItem,
    FenceItem,
    MemberItem,
    BlobUsageItem,
)


def bind(settings: Settings) -> None:
    """Point the models at the configured table and engine, through one shared client.

    One client for all models (they share the table and its keys) means one
    connection pool, and one place for hooks such as the capacity counter.
    """
    target = (settings.table_name, settings.aws_region, settings.dynamodb_endpoint)
    meta = RecordItem.Meta
    if (meta.table_name, meta.region, meta.host) != target:
        for model in MODELS:
            model.Meta.table_name, model.Meta.region, model.Meta.host = target
            model._connection = None
    shared = RecordItem._get_connection()
    for model in MODELS:
        model._connection = shared
    json_items.install(shared.connection.client)
