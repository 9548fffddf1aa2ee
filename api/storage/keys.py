"""The key design of the single table. Persisted contract: never change a prefix.

Items (all in one table, `pk` hash key, `sk` range key, both strings):

    item      pk                 sk            attributes
    -------   ----------------   -----------   ----------------------------------------
    entity    T#<tenant>         I#<id>        ty, id, tok, ca, del, f (the record), by
                                               (the writer's sub), lr (the release its
                                               copy is under; absent: deleted, or
                                               written before copies); a deleted
                                               entity's stays: its id is never reused;
                                               ow (its owner), vw (shared with besides
                                               the owner; absent: tenant-wide), as on
                                               every log, stream, version and copy item
    log       T#<tenant>#LOG     <token>       same record as the entity item, and
                                               pv: the token of the main entry before
                                               it; a deletion's: exp (TTL, retention);
                                               lv: a LeftView sentinel (no f; exp)
    stream    T#<tenant>#V#<principal> <token>  a restricted version in each stream
                                               of its audience (m:<sub>), or a
                                               sentinel (lv, or del) with exp; no pv
    head      T#<tenant>#LOG     ~HEAD         tok: the last token of the tenant's latest
                                               transaction, pv: the one before it (absent
                                               after the first), n: how many log entries
                                               it wrote (absent: 1), dx: the entries its
                                               writes replaced (absent: none), b: the
                                               tenant's first token; lc, lx: the later
                                               copies it put and removed (absent: none);
                                               cp: while it equals tok, every live entity
                                               has its copy (models.HeadItem; else the
                                               log is read); while the tenant
                                               is deleted: xby, xat (who, when), xn
                                               (items removed so far), xid (the
                                               deletion's id, as on its usage item);
                                               who sees what: vis (the tenant had a
                                               restricted record), lm, pm (the last main
                                               token, and before it), mt (its main
                                               tokens), vp, vx (stream entries put and
                                               removed, <token>#<principal>)
    version   T#<tenant>#HIST    <id>#<token>  an earlier version of entity <id>, the
                                               record as written at <token>; exp (TTL:
                                               retention after it was replaced)
    copy      T#<tenant>#LATER   <type>#<release>#<id>  a live entity's current version
                                               (<type>: its type's code; <release>: 4
                                               digits, the newest release whose content
                                               it holds, its type's at least; the same
                                               as the entity's lr); one per live
                                               entity, none for a deleted one; what an
                                               upgrade catches up on (docs/evolution.md;
                                               earlier keys, <release>#<id>, are unread)
    outcome   T#<tenant>         M#<cmid>      fp (fingerprint), out (JSON), exp (TTL)
    member    T#<tenant>#MEM     U#<sub>       role, tok: a live Member record's access
                                               (contract 6), written with the record
    marker    T#<tenant>#MEM     V             the tenant moved to membership as data
    export    T#<tenant>#EXP     <export>      an export job: by, at, ph (phase), cur (where it
                                               goes on), np (parts written), ne, nv (entities,
                                               versions), nb (bytes), tok (its sync's token),
                                               htk (its first sync's: the history's bound),
                                               btk, ctk (its first read's, last check's); while it
                                               publishes the file to S3 (`export_key`): pn (the
                                               next part to copy), up (the multipart upload's
                                               id), et (ETags of the S3 parts uploaded); exp
                                               (TTL); key (jobs before S3 delivery; unread)
    part      T#<tenant>#EXP     <export>#<n>  d: part n of the export's file (a gzip
                                               member), exp (TTL); kept after the file is
                                               in S3, until the TTL (a free delete)
    socket    C#<connection>     CONN          AWS WebSocket connection: sub, until (the
                                               token's exp), subs (subscription id ->
                                               tenant), exp (TTL)
    subscr.   T#<tenant>#SUB     <conn>#<sub>  cid, sid, q (document), v (the variables
                                               it declares, JSON), op (operationName),
                                               sub, until, last (the token last sent
                                               on it), exp (TTL)
    usage     T#<tenant>#BLOB    USAGE         the tenant's blobs (api.storage.blob_usage): room
                                               (bytes requestUpload may still reserve),
                                               reg (listed in the registry), gen (the
                                               generation of its blob keys; absent: ""),
                                               vis (it had a restricted record: set with
                                               the head's), xat, xid (while the tenant
                                               is deleted: since when, the deletion's id);
                                               lb, le (bytes reserved while the latest
                                               links may be used, when the last expires);
                                               hb, hu (held for an earlier generation's
                                               uploads, until when they may land); kept
                                               by a deletion as {gen} (and hb, hu, room
                                               while old links may upload) once it reserved
    sweep     T#<tenant>#BLOB    SWEEP         the sweep of its blobs: st (the pass, JSON:
                                               phase, where it goes on, bytes listed,
                                               candidates, marked sha256 -> version id
                                               and when), lh, lu (the sweep holding it:
                                               who, until when)
    device    T#<tenant>#DEV     D#<device>    a device registered for silent pushes
                                               (api.storage.devices): by (the member),
                                               pf (APNS|FCM), dt (its push token), arn
                                               (its SNS platform endpoint), at; pt, pa
                                               (the token last pushed, when, epoch ms),
                                               nx (a newer token waiting for the end of
                                               the device's window)
    count     T#<tenant>#DEV     N, N#<sub>    n: the tenant's registrations, a member's
    fence     T#<tenant>#FENCE   FENCE         tok: the highest token the tenant id ever had,
                                               set by the last call of each deletion; a
                                               tenant written again starts above it
    registry  BLOBS#<shard>      <tenant>      a tenant with blobs (shard: 0-15 by a hash
                                               of its id); due: when its next sweep is
    lease     RT#STREAM          LEASE         the stream reader's lease: holder (server id),
                                               exp (when it lapses unless renewed; TTL)
    server    RT#STREAM          S#<server>    a server that takes pokes: url, exp (when it
                                               lapses unless renewed; TTL)

(Before the first release the head moved here from T#<tenant>/HEAD and log entries
and the head gained `pv`: delete a local data directory written before that. A head
without `n`, from before group commit, wrote one entry.)

Access patterns:

    read one entity        GetItem entity (consistent)
    start a write          BatchGetItem (consistent, 100 keys a call) of the entities
                           and outcomes a push (or one mutation) names
    read the head          GetItem head (consistent): a process's first write to a tenant
    start a sync           Query pk=T#<tenant>#LOG, sk > since, descending,
                           consistent, Limit 1 + 11: the head and the newest log
                           entries, which are the whole sync when it has at most
                           10 changes and their `pv` links are unbroken; a second
                           Query (pv, tok] when the head's transaction wrote more
                           entries than the first could return
    a page of `changes`    Query pk=T#<tenant>#LOG, after < sk <= upper, ascending,
                           consistent; returns full records, no second read
    any write              TransactWriteItems of, per entity written (up to 49, in
                           push order, consecutive tokens): entity (conditioned on
                           its token), old log entry (delete), new log entry (put,
                           pv = the entry before it, h for the first), with a
                           clientMutationID its outcome (put, if absent or expired);
                           with history on, the version it replaces (put);
                           its copy (put, unless a deletion; the delete of the key
                           its previous version's lr names, when that key moved or
                           the entity is deleted);
                           then the head (update tok := last, pv := h, n, dx,
                           conditioned on tok = h) and, unless this process wrote the
                           transaction at h, a ConditionCheck that each of its log
                           entries exists (on the delete instead for an entry it
                           replaces) and that each entry in its dx is gone, and
                           likewise each later copy in its lc exists, each in its
                           lx is gone; the tenant's first (no head): a
                           ConditionCheck that the fence is absent or below its
                           first token
    a flagged sync         with the log's Query, Query pk=T#<tenant>#V#m:<sub>, after <
                           sk <= upper, ascending, consistent (docs/ordering.md)
    catch up an upgrade    GetItem head (consistent); per page, for each type asked,
                           Query pk=T#<tenant>#LATER, sk BETWEEN <type>#<floor># AND
                           <type>#~ (consistent, from the cursor, Limit what the
                           page still holds): the entities of that type holding
                           content of the earliest release asked of it or a later
                           one (a type asked: all of it); and while the head's
                           transaction is at or below upTo, Query the log (pv, tok]
                           of that head (docs/ordering.md, "Catching up an
                           upgrade"). A head whose cp is not its tok: Query the log, sk <= upTo,
                           a page at a time
    history                Query pk=T#<tenant>#HIST, begins_with(sk, <id>#),
                           descending, Limit: an entity's earlier versions, newest first
    export a tenant        PutItem job; per step, a `changes` page (live entities) or Query
                           pages of T#<tenant>#HIST, sk > a key (versions up to the first
                           sync's token; at an entity's first later one, the next Query
                           starts past `<id>#~`), then TransactWriteItems: its parts (put)
                           and the job (put, conditioned on np, ph, pn, up); then
                           publishing: Query parts (consistent) from pn, one PutObject
                           (file <= 5 MiB) or per 5 MiB an UploadPart, then PutItem job
                           (same condition); download: GetItem job, a presigned S3 GET; a
                           call with an exportID: GetItem head, Query (consistent, sk > ctk,
                           filter lv) of the log and its streams, BatchGetItem (export_view)
    delete a tenant        per call: UpdateItem usage (mark: xat, xid), GetItem head
                           (consistent) and, unless it carries that xid,
                           TransactWriteItems: ConditionCheck usage (xid), UpdateItem
                           head (mark); in S3, under each of `tenant_prefixes`,
                           ListObjectVersions and DeleteObjects (every version and
                           delete marker), ListMultipartUploads and AbortMultipartUpload,
                           a GetItem head (xid) before each DeleteObjects; then Query
                           (keys only, consistent) each
                           of T#<tenant>, T#<tenant>#HIST, T#<tenant>#LATER, T#<tenant>#SUB,
                           T#<tenant>#DEV, T#<tenant>#EXP, T#<tenant>#MEM, T#<tenant>#BLOB,
                           T#<tenant>#LOG, first the streams of its records' audiences
                           (entity items' ow, vw)
                           and per page GetItem head (xid), BatchWriteItem deletes,
                           UpdateItem head (xn, conditioned on xid), 5,000 items a call;
                           last: GetItem head and usage (consistent), TransactWriteItems:
                           DeleteItem head, UpdateItem (or DeleteItem) usage, both
                           conditioned on xid, UpdateItem fence (tok), PutItem registry
                           (due) when old links may still upload
    check a caller         Query pk=T#<tenant>#MEM, sk >= U#<sub>, Limit 1 (consistent),
                           once per tenant and request: U#<sub>, a member and its
                           role; another item (V sorts after every U#), a moved
                           tenant's non-member; none, a claim tenant; realtime:
                           the whole partition, once per tenant and change
    write a Member         with its record: put (delete) U#<sub>; the first, put V
                           (conditioned absent), else a ConditionCheck of the
                           writer's U# (role owner; on its put when it writes it)
    replay a mutation      GetItem outcome (consistent)
    attachments            blobs are S3 objects (`blob_key` below), one HeadObject
                           per requestUpload or attachment; requestUpload of an absent
                           blob: UpdateItem usage (room -= size, lb += size, conditioned
                           room >= size and le >= now; failing that, lb := size,
                           conditioned le < now);
                           the tenant's first: PutItem registry, UpdateItem usage (reg)
    sweep of blobs         per call: UpdateItem sweep (take it: lu lapsed), GetItem usage,
                           ListObjectsV2
                           pages; with candidates or marks, Query (consistent) pages of
                           T#<tenant> (sk begins with I#) then T#<tenant>#HIST; UpdateItem
                           sweep (st) per step, conditioned on lh; at a pass's start,
                           ListObjectVersions (delimiter "/") of the tenant's prefix and
                           DeleteObjects of every generation but the current, each after
                           a GetItem usage (the generation still current); at its end
                           UpdateItem usage (room; hb, hu), PutItem registry (due). Scheduled:
                           Query BLOBS#<shard>, filter due <= now
    AWS realtime           GetItem/PutItem/UpdateItem socket per WebSocket message;
                           TransactWriteItems per subscribe: the socket's map (update,
                           conditioned) and the subscription (put), both or neither;
                           Query pk=T#<tenant>#SUB (consistent) per head change the stream
                           handler fans out (api.realtime.aws), and per subscriber an
                           UpdateItem of its `last` token (conditioned: only if newer)
    push devices           register: TransactWriteItems of the device (put, conditioned absent or
                           the caller's) and, when new, both counts (n + 1, conditioned n < the
                           bound); unregister: the device (delete, conditioned the caller's), both
                           counts (n - 1); list: Query pk=T#<tenant>#DEV begins_with D#
                           (consistent); per head change pushed: that Query, the roster's, per
                           device an UpdateItem claiming the token (conditioned: pt older, pa out of
                           the window) or setting nx (conditioned: older)
    stream reader lease    per server every 5 s: PutItem its server item, GetItem
                           lease; the reader UpdateItem lease (conditioned: held by
                           it, or lapsed) and Query pk=RT#STREAM (consistent): the
                           servers it hands head changes to (api.realtime.lease)

The transactions of a tenant form a chain: each commits only as the link after
the head it expects, once every log entry of that head's transaction is applied; a
sync bounds itself by what its first read proves (`api.domain.chain`, proved in
docs/ordering.md). The head sorts above the log, in its partition: a descending
Query returns the head and the newest entries at once (a poll costs one Query).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

# The S3 keys of blobs and exports, part of this key design (keys.blob_key, ... as before).
from api.storage.bucket_keys import (  # noqa: F401
    BLOB_KEY_PREFIX,
    EXPORT_KEY_PREFIX,
    blob_key,
    blob_prefix,
    export_key,
    tenant_blobs_prefix,
    tenant_prefixes,
)

# Above every change token (ULIDs use 0-9 and A-Z): the top of the log partition.
HEAD_SK = "~HEAD"
_TENANT_PREFIX = "T#"
_LOG_SUFFIX = "#LOG"
_SUBSCRIPTIONS_SUFFIX = "#SUB"
_HISTORY_SUFFIX = "#HIST"
_LATER_SUFFIX = "#LATER"
_EXPORT_SUFFIX = "#EXP"
_DEVICES_SUFFIX = "#DEV"
_DEVICE_PREFIX = "D#"
DEVICE_COUNT_SK = "N"
_CONNECTION_PREFIX = "C#"
CONNECTION_SK = "CONN"
_ENTITY_PREFIX = "I#"
_OUTCOME_PREFIX = "M#"
# The stream reader's lease and the servers it hands pokes to (api.realtime.lease).
READERS_PK = "RT#STREAM"
LEASE_SK = "LEASE"
_SERVER_PREFIX = "S#"
# The tenant id's fence (`fence_pk`): its highest token, in this attribute.
FENCE_SK = "FENCE"
FENCE_ATTRIBUTE = "tok"
_FENCE_SUFFIX = "#FENCE"
# DynamoDB's TTL deletes items whose `exp` (epoch seconds) has passed.
TTL_ATTRIBUTE = "exp"
# On a head: the tenant is being deleted (who asked); realtime reads it off the stream.
DELETING_ATTRIBUTE = "xby"


def _partition(suffix: str) -> Callable[[str], str]:
    """The key of a tenant's partition: T#<tenant> and `suffix`."""
    return lambda tenant_id: f"{_TENANT_PREFIX}{tenant_id}{suffix}"


def _prefixed(prefix: str) -> Callable[[str], str]:
    """A key made of `prefix` and an id (a sub, a connection's, a server's...)."""
    return lambda key: f"{prefix}{key}"


tenant_pk, log_pk, history_pk = _partition(""), _partition(_LOG_SUFFIX), _partition(_HISTORY_SUFFIX)
later_pk, export_pk = _partition(_LATER_SUFFIX), _partition(_EXPORT_SUFFIX)
subscriptions_pk = _partition(_SUBSCRIPTIONS_SUFFIX)
# The partition of the tenant's push devices and their counts (swept with it); the
# count of one member's devices in the tenant.
devices_pk, member_devices_sk = _partition(_DEVICES_SUFFIX), _prefixed(f"{DEVICE_COUNT_SK}#")


def device_sk(device_id: str = "") -> str:
    """The device's item; without an id, the prefix of them all."""
    return f"{_DEVICE_PREFIX}{device_id}"


_STREAM_SUFFIX = "#V#"


def stream_pk(tenant_id: str, principal: str) -> str:
    """The stream of one principal (`m:<sub>`, `api.domain.visibility`): the entries of
    the restricted records it sees, and the sentinels of those that left its view."""
    return f"{_TENANT_PREFIX}{tenant_id}{_STREAM_SUFFIX}{principal}"


def fence_pk(tenant_id: str) -> str:
    """The partition of the tenant id's fence: its one item outlives every deletion, so
    that the tenant written again starts above every token it had (contract 3.8),
    whatever the clock of the server that writes it."""
    return f"{_TENANT_PREFIX}{tenant_id}{_FENCE_SUFFIX}"


def later_sk(type_code: str, release: int, entity_id: str = "") -> str:
    """The copy of entity `entity_id`, of the type stored as `type_code`, under
    `release`; without an id, where that type's copies under `release` and later
    ones begin (a type code holds no `#`)."""
    return f"{type_code}#{release:04d}#{entity_id}"


def later_end(type_code: str) -> str:
    """Past every copy of the type stored as `type_code` (`~` sorts after every
    character of a release and an entity id)."""
    return f"{type_code}#~"


def history_sk(entity_id: str, token: str = "") -> str:
    """The version of `entity_id` at `token`; without one, the prefix of them all."""
    return f"{entity_id}#{token}"


def export_part_sk(export_id: str, part: int | None = None) -> str:
    """Part `part` of the export's file; without one, the prefix of them all."""
    return f"{export_id}#" if part is None else f"{export_id}#{part:06d}"


entity_sk, outcome_sk = _prefixed(_ENTITY_PREFIX), _prefixed(_OUTCOME_PREFIX)


def is_entity_sk(sk: str) -> bool:
    return sk.startswith(_ENTITY_PREFIX)


def is_outcome_sk(sk: str) -> bool:
    return sk.startswith(_OUTCOME_PREFIX)


_MEMBERS_SUFFIX = "#MEM"
_MEMBER_PREFIX = "U#"
# Sorts after every member's key: a Query from U#<sub> meets it when no later member's.
MOVED_SK = "V"
members_pk, member_sk = _partition(_MEMBERS_SUFFIX), _prefixed(_MEMBER_PREFIX)


def tenant_of_head(pk: str, sk: str) -> str | None:
    """The tenant whose head has this key, or None for any other item."""
    if sk != HEAD_SK or not pk.startswith(_TENANT_PREFIX) or not pk.endswith(_LOG_SUFFIX):
        return None
    return pk[len(_TENANT_PREFIX) : -len(_LOG_SUFFIX)]


def subscription_sk(connection_id: str, subscription_id: str) -> str:
    return f"{connection_id}#{subscription_id}"


connection_pk, server_sk = _prefixed(_CONNECTION_PREFIX), _prefixed(_SERVER_PREFIX)


def server_of(sk: str) -> str | None:
    """The server whose item has this sort key (in READERS_PK), or None."""
    return sk[len(_SERVER_PREFIX) :] if sk.startswith(_SERVER_PREFIX) else None


_BLOBS_SUFFIX = "#BLOB"
USAGE_SK = "USAGE"
SWEEP_SK = "SWEEP"
_REGISTRY_PREFIX = "BLOBS#"
# Tenants with blobs are listed in this many partitions, so that the scheduled sweep
# reads them without a Scan and no partition holds them all (docs/attachments.md).
REGISTRY_SHARDS = 16
# The partition of the tenant's blob usage item (removed with the tenant).
blobs_pk = _partition(_BLOBS_SUFFIX)


def registry_pk(shard: int) -> str:
    return f"{_REGISTRY_PREFIX}{shard}"


def registry_shard(tenant_id: str) -> int:
    """The registry partition of a tenant: a stable hash of its id (not Python's
    `hash`, which changes from process to process)."""
    return int.from_bytes(hashlib.sha256(tenant_id.encode()).digest()[:4], "big") % REGISTRY_SHARDS
