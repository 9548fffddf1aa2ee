"""The key design of the single table. Persisted contract: never change a prefix.

(Changed once, before the first release: the head moved from T#<tenant>/HEAD to
the top of the log partition. A local data directory written before that has
no head where it is now looked for; delete it and sync again.)

Items (all in one table, `pk` hash key, `sk` range key, both strings):

    item      pk                 sk            attributes
    -------   ----------------   -----------   ----------------------------------------
    entity    T#<tenant>         I#<id>        ty, id, tok, ca, del, f (the record)
    log       T#<tenant>#LOG     <token>       same record as the entity item
    head      T#<tenant>#LOG     ~HEAD         tok: the tenant's latest change token
    outcome   T#<tenant>         M#<cmid>      fp (fingerprint), out (JSON), exp (TTL)

Access patterns:

    read one entity        GetItem entity (consistent)
    start a sync           Query pk=T#<tenant>#LOG, sk > since, descending,
                           consistent, Limit 1 + 11: the head (the sync's upper
                           bound) and the newest log entries, which are the whole
                           sync when it has at most 10 changes
    a page of `changes`    Query pk=T#<tenant>#LOG, after < sk <= upper, ascending,
                           consistent; returns full records, no second read
    any write              TransactWriteItems of: entity (conditioned on its token),
                           old log entry (delete), new log entry (put), head (update
                           conditioned on tok < new token), and with a
                           clientMutationID its outcome (put, if absent or expired)
    replay a mutation      GetItem outcome (consistent)

Why commit order equals token order: every write of a tenant updates the head
under the condition `tok < newToken` in the same transaction as its log entry,
so writes of one tenant serialize on the head and a later commit always holds a
greater token. Why no change is missed: the log holds exactly one entry per
entity, at its latest token; a sync reads the head first and pages up to it, and
any write committed after that read lands above the head, where the next sync
starts. An entry can only leave the paged range by moving above it.

Why the head sorts above the log, in the log's partition: a descending Query
reads it first (DynamoDB documents that it "reads the results in reverse order
by sort key value"), so one Query gives the head and then every entry at or
below it that committed before it, all from one partition. A poll or a small
sync costs one Query, with no separate read of the head.
"""

from __future__ import annotations

# Above every change token (ULIDs use 0-9 and A-Z): the top of the log partition.
HEAD_SK = "~HEAD"
_ENTITY_PREFIX = "I#"
_OUTCOME_PREFIX = "M#"
# DynamoDB's TTL deletes items whose `exp` (epoch seconds) has passed.
TTL_ATTRIBUTE = "exp"


def tenant_pk(tenant_id: str) -> str:
    return f"T#{tenant_id}"


def log_pk(tenant_id: str) -> str:
    return f"T#{tenant_id}#LOG"


def entity_sk(entity_id: str) -> str:
    return f"{_ENTITY_PREFIX}{entity_id}"


def is_entity_sk(sk: str) -> bool:
    return sk.startswith(_ENTITY_PREFIX)


def outcome_sk(client_mutation_id: str) -> str:
    return f"{_OUTCOME_PREFIX}{client_mutation_id}"


def is_outcome_sk(sk: str) -> bool:
    return sk.startswith(_OUTCOME_PREFIX)
