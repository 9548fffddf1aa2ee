"""Silent pushes from the table's stream on AWS: the fan-out function's batch of
head changes (`api.realtime.aws.stream_handler`), each tenant's newest token pushed
to its devices but the writer's, of the members whose view the batch's changes are
in (the pokes' audience, `streams.audience_of`, merged) and still members
(`api.service.pushes`); a token that must wait for a device's window goes on the
push queue, delayed to the window's end, whose handler (`push_flush_handler`)
pushes it then. A round that fails fails the batch, which Lambda retries and,
spent, records on the fan-out's failure queue: the drain pushes its tenants' heads
as they are then, by the audience it pokes (`api.realtime.fanout.drain`: UNTOLD
others only where their member's view changed)."""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Iterable, Mapping
from typing import Any

from api import metrics
from api.domain.audiences import Audience, coalesced
from api.realtime.aws_runtime import FanOutIncomplete, Runtime
from api.realtime.streams import audience_of
from api.service.pushes import PushRound
from api.storage import keys

logger = logging.getLogger("api.pushes")

# SQS delays a message at most 15 minutes: a later window's flush is sent again.
MAX_DELAY_S = 900


Change = tuple[str, str | None, Audience]  # token, the writer's device, who it is for


def writes(records: Iterable[Mapping[str, Any]]) -> dict[str, Change]:
    """Tenant -> (its newest head token among `records`, the device that wrote every
    one of them, or None when they name no device or several, and the members whose
    view they changed, coalesced as pokes coalesce them: the newest change's, UNTOLD
    for a member only an older one was for; None, every member); a tenant being
    deleted is left out (nothing is pushed for it), and so is a tenant whose heads
    say it has no push device (`has_devices`): its round would read none."""
    found: dict[str, tuple[str, Audience]] = {}
    devices: dict[str, set[str | None]] = {}
    flagged = {t for t, has in _flags(records).items() if has is not False}
    for record in records:
        if record.get("eventName") not in ("INSERT", "MODIFY"):
            continue
        change = record.get("dynamodb", {})
        key = change.get("Keys", {})
        tenant_id = keys.tenant_of_head(
            key.get("pk", {}).get("S", ""), key.get("sk", {}).get("S", "")
        )
        image = change.get("NewImage", {})
        token = image.get("tok", {}).get("S")
        if tenant_id is None or not isinstance(token, str):
            continue
        if keys.DELETING_ATTRIBUTE in image:
            found.pop(tenant_id, None)
            devices[tenant_id] = {None}
            continue
        devices.setdefault(tenant_id, set()).add(image.get("dv", {}).get("S"))
        poke = (token, audience_of(image))
        before = found.get(tenant_id)
        found[tenant_id] = poke if before is None else coalesced(poke, before)
    changes: dict[str, Change] = {}
    for tenant_id, (token, audience) in found.items():
        if tenant_id not in flagged:
            continue
        named = devices[tenant_id]
        changes[tenant_id] = (token, next(iter(named)) if len(named) == 1 else None, audience)
    return changes


def _flags(records: Iterable[Mapping[str, Any]]) -> dict[str, bool | None]:
    """Tenant -> whether its heads among `records` say it has push devices: True, one
    carries the flag a registration sets (`keys.PUSH_DEVICES_ATTRIBUTE`, which every
    later write's update of the head keeps); None, none does but one is the tenant's
    first (no previous token: devices registered before the head existed are not
    flagged, so its round reads them, and flags the head); False, neither."""
    flags: dict[str, bool | None] = {}
    for record in records:
        change = record.get("dynamodb", {})
        key = change.get("Keys", {})
        tenant_id = keys.tenant_of_head(
            key.get("pk", {}).get("S", ""), key.get("sk", {}).get("S", "")
        )
        if tenant_id is None:
            continue
        image = change.get("NewImage", {})
        if keys.PUSH_DEVICES_ATTRIBUTE in image:
            flags[tenant_id] = True
        elif keys.HEAD_PREV_ATTRIBUTE not in image and flags.get(tenant_id) is not True:
            flags[tenant_id] = None
        else:
            flags.setdefault(tenant_id, False)
    return flags


def unflagged(records: Iterable[Mapping[str, Any]]) -> set[str]:
    """The tenants of `records` pushed without the head's flag (a first write's)."""
    return {t for t, has in _flags(records).items() if has is None}


def push_all(rt: Runtime, changes: Mapping[str, Change], unflagged: Iterable[str] = ()) -> int:
    """Each tenant's round; how many pushes were sent. Raises FanOutIncomplete once
    every tenant was tried if any round failed. `unflagged`: tenants whose head does
    not carry the flag of push devices; where their round reads some, it is set."""
    first = set(unflagged)
    pushes = rt.pushes
    if pushes is None:
        return 0
    sent, failed = 0, 0
    for tenant_id, (token, writer, audience) in changes.items():
        try:
            done = pushes.notify(tenant_id, token, writer, audience)
        except Exception:  # any: the other tenants are still pushed
            logger.exception("the push round of %s failed", tenant_id)
            failed += 1
            continue
        sent += len(done.sent)
        failed += done.failed
        _later(rt, tenant_id, done)
        if tenant_id in first and done.devices:
            try:
                pushes.flag(tenant_id)
            except Exception:  # any: this round pushed; a later write's reads again
                logger.exception("the push devices' flag of %s was not set", tenant_id)
                failed += 1
    _count(rt, sent, failed)
    if failed:
        raise FanOutIncomplete(f"{failed} silent pushes failed")
    return sent


def flush(rt: Runtime, body: str) -> int:
    """One message of the push queue: its tenant's waiting tokens pushed."""
    pushes = rt.pushes
    if pushes is None:
        return 0
    tenant_id = str(json.loads(body)["tenantID"])
    done = pushes.flush(tenant_id)
    _later(rt, tenant_id, done)
    _count(rt, len(done.sent), done.failed)
    if done.failed:
        raise FanOutIncomplete(f"{done.failed} silent pushes failed")
    return len(done.sent)


def _count(rt: Runtime, sent: int, failed: int) -> None:
    if sent:
        rt.metrics.add(metrics.SILENT_PUSHES, sent)
    if failed:
        rt.metrics.add(metrics.SILENT_PUSH_FAILURES, failed)


def _later(rt: Runtime, tenant_id: str, done: PushRound) -> None:
    """Put the tenant on the push queue for the end of its earliest window."""
    if done.due_ms is None:
        return
    delay = math.ceil(max(0.0, done.due_ms / 1000 - time.time()))
    rt.push_queue.send_message(
        QueueUrl=rt.settings.push_queue_url,
        MessageBody=json.dumps({"tenantID": tenant_id}),
        DelaySeconds=min(delay, MAX_DELAY_S),
    )
