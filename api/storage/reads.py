"""Reads of the single table, strongly consistent, as DynamoDB's JSON decoded by
`api.storage.codecs`: one item, the log's tail with what it proves, a range of the
log, and many items of one tenant in one BatchGetItem."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

from pynamodb.connection import Connection

from api.domain.chain import Head, prove_tail
from api.domain.errors import TenantDeleted, Unavailable
from api.domain.mutations import StoredOutcome
from api.domain.records import LogTail, Record
from api.domain.tokens import token_after, token_before
from api.storage import codecs, keys
from api.storage.errors import translated
from api.storage.models import RecordItem

# BatchGetItem reads at most this many keys per call.
_BATCH_GET_KEYS = 100
# Keys a throttled BatchGetItem leaves unprocessed are asked for again this often.
_BATCH_GET_ROUNDS = 5


# Raw client calls ask for the capacity they consume, as PynamoDB's own calls do:
# the request log adds it up (`api.request_log`).
TOTAL_CAPACITY = "TOTAL"


def connection() -> Connection:
    return RecordItem._get_connection().connection


def head(tenant_id: str) -> Head | None:
    item = _get_raw(keys.log_pk(tenant_id), keys.HEAD_SK)
    if item is not None and codecs.is_deleting(item):
        raise TenantDeleted("this tenant is being deleted")
    return None if item is None else codecs.head_from_raw(item)


def fence(tenant_id: str) -> str | None:
    """The tenant id's fence: the highest token a deleted life of it had (None: none)."""
    item = _get_raw(keys.fence_pk(tenant_id), keys.FENCE_SK)
    return None if item is None else str(item[keys.FENCE_ATTRIBUTE]["S"])


def log_tail(tenant_id: str, after: str | None, count: int) -> LogTail:
    """The head and up to `count` of the newest log entries above `after`, in one
    descending Query (the head sorts above every token), and what they prove
    (`api.domain.chain`): the sync's bound and the linked entries below it.

    When the head's transaction wrote more entries than the Query could return,
    a second Query reads them all: without them the bound would stay below it."""
    log_pk = keys.log_pk(tenant_id)
    raw_items, _ = _query_page(
        log_pk, None if after is None else _sk("#sk > :a", a=after), count + 1, ascending=False
    )
    head: Head | None = None
    head_prev = born = None
    if raw_items and codecs.sort_key(raw_items[0]) == keys.HEAD_SK:
        head_item, raw_items = raw_items[0], raw_items[1:]
        if codecs.is_deleting(head_item):
            raise TenantDeleted("this tenant is being deleted")
        head, head_prev = codecs.head_from_raw(head_item), codecs.prev_of(head_item)
        born = codecs.born_of(head_item)
    entries = {codecs.sort_key(raw): raw for raw in raw_items}
    links = {t: codecs.prev_of(r) for t, r in entries.items()}
    head_token = None if head is None else head.token
    main_top = None if head is None else head.last_main
    main_below = None if head is None else head.prev_main
    proof = prove_tail(head_token, head_prev, links, after, main_top, main_below)
    if head is not None and proof.bound != head.token and len(raw_items) == count:
        lowest = max(filter(None, (after, head_prev)), default=None)
        if head.entries > count and (lowest is None or lowest < head.token):
            between = _log_range(lowest, head.token)
            for raw in _query_page(log_pk, between, head.entries)[0]:
                entries[codecs.sort_key(raw)] = raw
                links[codecs.sort_key(raw)] = codecs.prev_of(raw)
            proof = prove_tail(head.token, head_prev, links, after, main_top, main_below)
    return LogTail(
        head=head_token,
        bound=proof.bound,
        records=[codecs.record_from_raw(tenant_id, entries[t]) for t in proof.linked],
        complete=proof.complete,
        settled=head_prev,
        born=born,
        last=head,
    )


def entity(tenant_id: str, entity_id: str) -> Record | None:
    item = _get_raw(keys.tenant_pk(tenant_id), keys.entity_sk(entity_id))
    return None if item is None else codecs.record_from_raw(tenant_id, item)


def outcome(tenant_id: str, client_mutation_id: str) -> StoredOutcome | None:
    raw = _get_raw(keys.tenant_pk(tenant_id), keys.outcome_sk(client_mutation_id))
    return None if raw is None else codecs.outcome_from_raw(tenant_id, raw)


def many(
    tenant_id: str, entity_ids: Iterable[str], client_mutation_ids: Iterable[str]
) -> tuple[dict[str, Record], dict[str, StoredOutcome]]:
    """Entities and stored outcomes of one tenant, by id (absent: none), strongly
    consistent, in one BatchGetItem per 100 keys: what a push is based on."""
    pk = keys.tenant_pk(tenant_id)
    wanted = [keys.entity_sk(i) for i in dict.fromkeys(entity_ids)]
    wanted += [keys.outcome_sk(c) for c in dict.fromkeys(client_mutation_ids)]
    records: dict[str, Record] = {}
    outcomes: dict[str, StoredOutcome] = {}
    for start in range(0, len(wanted), _BATCH_GET_KEYS):
        for raw in _batch_get_raw(pk, wanted[start : start + _BATCH_GET_KEYS]):
            if keys.is_outcome_sk(codecs.sort_key(raw)):
                stored = codecs.outcome_from_raw(tenant_id, raw)
                if stored is not None:
                    outcomes[stored.client_mutation_id] = stored
            else:
                record = codecs.record_from_raw(tenant_id, raw)
                records[record.id] = record
    return records, outcomes


def log_range(
    tenant_id: str, after: str | None, upper: str, limit: int, pk: str | None = None
) -> tuple[list[Record], bool]:
    """Log entries with after < token <= upper, ascending; and whether more follow.
    `pk`: another partition of entries by token (a stream, `api.storage.streams`)."""
    log_pk, condition = pk or keys.log_pk(tenant_id), _log_range(after, upper)
    raw_items: list[dict[str, Any]] = []
    start_key = None
    # One Query, unless DynamoDB's 1 MB page limit cuts it short.
    while len(raw_items) <= limit:
        items, start_key = _query_page(
            log_pk, condition, limit + 1 - len(raw_items), start_key=start_key
        )
        raw_items += items
        if start_key is None:
            break
    records = [codecs.record_from_raw(tenant_id, raw) for raw in raw_items[: limit + 1]]
    return records[:limit], len(records) > limit


def version(
    tenant_id: str, entity_id: str, token: str, gone_before: int | None = None
) -> Record | None:
    """The version of `entity_id` at `token` that its history keeps (None: none, or
    its `exp` is below `gone_before`: past the retention, whether or not TTL has
    removed it yet)."""
    item = _get_raw(keys.history_pk(tenant_id), keys.history_sk(entity_id, token))
    if item is None or _past(item, gone_before):
        return None
    return codecs.record_from_raw(tenant_id, item)


def versions(
    tenant_id: str, entity_id: str, before: str | None, limit: int, gone_before: int | None = None
) -> tuple[list[Record], bool]:
    """Earlier versions of `entity_id` below `before` (None: all), newest first, in one
    Query; and whether more follow: beyond `limit`, or beyond DynamoDB's 1 MB page
    (its LastEvaluatedKey). A version whose `exp` is below `gone_before` is past the
    retention, and so is every older one (replaced earlier, so its `exp` is no
    later): the list ends there, whatever TTL has removed yet."""
    prefix = keys.history_sk(entity_id)
    condition = (
        _sk("begins_with(#sk, :p)", p=prefix)
        if before is None
        else _sk(
            "#sk BETWEEN :a AND :b",
            a=prefix,
            b=keys.history_sk(entity_id, token_before(before)),
        )
    )
    raw_items, last = _query_page(keys.history_pk(tenant_id), condition, limit + 1, ascending=False)
    kept = [raw for raw in raw_items if not _past(raw, gone_before)]
    more = last is not None and len(kept) == len(raw_items)
    records = [codecs.record_from_raw(tenant_id, raw) for raw in kept]
    return records[:limit], more or len(records) > limit


def _past(raw: dict[str, Any], gone_before: int | None) -> bool:
    expires = codecs.expires_of(raw)
    return gone_before is not None and expires is not None and expires < gone_before


def records_page(
    tenant_id: str, pk: str, sk_prefix: str, after: str | None, limit: int
) -> tuple[list[Record], str | None]:
    """Up to `limit` records of the partition `pk` whose sort key begins with
    `sk_prefix`, in key order after the sort key `after` (None: from the first), read
    consistently; and the sort key to go on from (None: the end). The whole of a
    tenant's entities or earlier versions, page by page (exports, the blob sweep)."""
    start = None if after is None else codecs.raw_key(pk, after)
    condition = _sk("begins_with(#sk, :p)", p=sk_prefix) if sk_prefix else None
    raw_items, last = _query_page(pk, condition, limit, start_key=start)
    records = [codecs.record_from_raw(tenant_id, raw) for raw in raw_items]
    return records, None if last is None else str(last[codecs.SK]["S"])


def later_copies(
    tenant_id: str,
    floors: Sequence[tuple[str, int]],
    after: tuple[str, int, str] | None,
    limit: int,
) -> tuple[list[Record], tuple[str, int, str] | None]:
    """Up to `limit` copies of the tenant's entities (docs/evolution.md), for each
    (type code, release) of `floors` in code order those of that type under that
    release or a later one, in key order, after the copy at `after` (code, release,
    id; None: from the first), read consistently; and where to go on from (the last
    copy read; None: the end)."""
    pk = keys.later_pk(tenant_id)
    records: list[Record] = []
    for code, floor in sorted(floors):
        if after is not None and code < after[0]:
            continue
        lo, hi = keys.later_sk(code, floor), keys.later_end(code)
        condition = _sk("#sk BETWEEN :lo AND :hi", lo=lo, hi=hi)
        start = None
        if after is not None and code == after[0]:
            start = codecs.raw_key(pk, keys.later_sk(*after))
        while True:
            raw_items, start = _query_page(pk, condition, limit - len(records), start_key=start)
            records += [codecs.record_from_raw(tenant_id, raw) for raw in raw_items]
            if len(records) == limit:
                last = records[-1]
                assert last.copy_release is not None
                return records, (last.item_type.code, last.copy_release, last.id)
            if start is None:
                break
    return records, None


# Past every sort key `<id>#<token>` of one entity (ids and tokens hold no `~`, which
# sorts after every character they use): where the versions of the next entity begin.
_PAST_ENTITY = "~"


def versions_upto(
    tenant_id: str, pk: str, after: str | None, upto: str, limit: int, max_read: int
) -> tuple[list[Record], str | None]:
    """Up to `limit` versions of the history partition `pk` written at or before the
    token `upto`, in key order after the sort key `after` (None: from the first); and
    the sort key to go on from (None: the end). At most `max_read` items are read in
    all (at least 2), by Queries that each read at least one.

    An entity's versions sort by token (`<id>#<token>`), so its first one past `upto`
    ends what is wanted of it: the next Query starts past the entity. Versions written
    since `upto` (a tenant rewritten throughout) thus cost a read each only until one
    is met per entity, however many there are: each Query after such a skip reads 2
    items, doubling while it meets none (a Query reads at most twice what the ones
    before it took since the last skip, plus 2)."""
    versions: list[Record] = []
    read = 0
    batch = 2
    position = after
    while len(versions) < limit and read < max_read:
        condition = None if position is None else _sk("#sk > :a", a=position)
        size = max(1, min(batch, limit - len(versions) + 1, max_read - read))
        raw_items, last = _query_page(pk, condition, size)
        read += len(raw_items)
        skipped = False
        for raw in raw_items:
            record = codecs.record_from_raw(tenant_id, raw)
            if record.change_token > upto:
                position = f"{record.id}#{_PAST_ENTITY}"
                skipped = True
                break
            position = str(raw[codecs.SK]["S"])
            versions.append(record)
            if len(versions) == limit:
                # (What the Query read past it is read again by the next step.)
                return versions, position
        if skipped:
            batch = 2
            continue
        if last is None:
            return versions, None
        batch *= 2
    return versions, position


def _get_raw(pk: str, sk: str) -> dict[str, Any] | None:
    """One item as DynamoDB's JSON, strongly consistent."""
    with translated():
        item: dict[str, Any] | None = (
            connection()
            .get_item(RecordItem.Meta.table_name, pk, range_key=sk, consistent_read=True)
            .get("Item")
        )
    return item


# A Query's condition on the sort key: its expression over `#sk`, and its values.
SortKeyCondition = tuple[str, dict[str, Any]]


def _sk(expression: str, **values: str) -> SortKeyCondition:
    return expression, {f":{name}": {"S": value} for name, value in values.items()}


def _query_page(
    pk: str,
    condition: SortKeyCondition | None,
    limit: int,
    ascending: bool = True,
    start_key: dict[str, Any] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """One consistent Query page of the partition `pk`, as DynamoDB's JSON, and the
    key to continue from (None: the range is read to its end)."""
    page = query(pk, condition, limit, ascending, start_key)
    items: list[dict[str, Any]] = page.get("Items", [])
    return items, page.get("LastEvaluatedKey")


def query(
    pk: str,
    condition: SortKeyCondition | None = None,
    limit: int | None = None,
    ascending: bool = True,
    start_key: dict[str, Any] | None = None,
    projected: dict[str, str] | None = None,
    kept: tuple[str, dict[str, str]] | None = None,
) -> dict[str, Any]:
    """One consistent Query page of the partition `pk` (at most `limit` items read, or
    1 MB): DynamoDB's answer whole (`Items`, `LastEvaluatedKey`, `ConsumedCapacity`,
    `ScannedCount`). `projected`: the attributes it returns (placeholder: name; all
    without); `kept`: a filter expression and its names (what it leaves out is read,
    and paid for, all the same).

    Asked of the client itself: PynamoDB's `query` (its condition objects, its
    table's description, its signals) took a poll 3% of its instructions in process
    (5.49 million against 5.33, cachegrind; the same call behind a bare route: 3.88)."""
    names = {"#pk": codecs.PK}
    values: dict[str, Any] = {":pk": {"S": pk}}
    expression = "#pk = :pk"
    if condition is not None:
        names["#sk"] = codecs.SK
        values.update(condition[1])
        expression = f"{expression} AND {condition[0]}"
    request: dict[str, Any] = {
        "TableName": RecordItem.Meta.table_name,
        "KeyConditionExpression": expression,
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": values,
        "ConsistentRead": True,
        "ScanIndexForward": ascending,
        "ReturnConsumedCapacity": TOTAL_CAPACITY,
    }
    if limit is not None:
        request["Limit"] = limit
    if projected:
        names.update(projected)
        request["ProjectionExpression"] = ", ".join(projected)
    if kept is not None:
        names.update(kept[1])
        request["FilterExpression"] = kept[0]
    if start_key is not None:
        request["ExclusiveStartKey"] = start_key
    with translated():
        answer: dict[str, Any] = connection().client.query(**request)
    return answer


def _log_range(after: str | None, upper: str) -> SortKeyCondition:
    """The log entries with after < token <= upper (no lower end: from the first)."""
    if after is None:
        return _sk("#sk <= :b", b=upper)
    return _sk("#sk BETWEEN :a AND :b", a=token_after(after), b=upper)


def _batch_get_raw(pk: str, sks: list[str]) -> list[dict[str, Any]]:
    """The items of `pk` at `sks` that exist (at most 100 keys), strongly consistent."""
    return batch_get_keys([codecs.raw_key(pk, sk) for sk in sks])


def batch_get_keys(pending: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The items at raw keys `pending` that exist (at most 100, any partitions), strongly
    consistent; the unprocessed keys asked again after a backoff."""
    table = RecordItem.Meta.table_name
    found: list[dict[str, Any]] = []
    for round_ in range(_BATCH_GET_ROUNDS):
        if round_:
            time.sleep(0.01 * 2**round_)  # throttled: back off before asking again
        with translated():
            # PynamoDB annotates `keys` as strings; it takes key maps like these.
            answer = connection().batch_get_item(
                table,
                pending,  # type: ignore[arg-type]
                consistent_read=True,
            )
        found += answer.get("Responses", {}).get(table, [])
        pending = answer.get("UnprocessedKeys", {}).get(table, {}).get("Keys", [])
        if not pending:
            return found
    raise Unavailable("the data store is busy; retry later")
