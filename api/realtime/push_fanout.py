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
from api.storage.devices import NO_PUSH_DEVICES_ATTRIBUTE

logger = logging.getLogger("api.pushes")

# SQS delays a message at most 15 minutes: a later window's flush is sent again.
MAX_DELAY_S = 900


Change = tuple[str, str | None, Audience]  # token, the writer's device, who it is for


def writes(records: Iterable[Mapping[str, Any]]) -> dict[str, Change]:
    """Tenant -> (its newest head token among `records`, the device that wrote every
    one of them, or None when they name no device or several, and the members whose
    view they changed, coalesced as pokes coalesce them: the newest change's, UNTOLD
    for a member only an older one was for; None, every member); a tenant being
    deleted is left out (nothing is pushed for it), and so is a tenant whose newest
    head among them says it has no push device (`NO_PUSH_DEVICES_ATTRIBUTE`)."""
    found: dict[str, tuple[str, Audience]] = {}
    devices: dict[str, set[str | None]] = {}
    empty: dict[str, bool] = {}
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
        empty[tenant_id] = NO_PUSH_DEVICES_ATTRIBUTE in image
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
        if empty[tenant_id]:
            continue
        named = devices[tenant_id]
        changes[tenant_id] = (token, next(iter(named)) if len(named) == 1 else None, audience)
    return changes


def push_all(rt: Runtime, changes: Mapping[str, Change], mark_empty: bool = False) -> int:
    """Each tenant's round; how many pushes were sent. Raises FanOutIncomplete once
    every tenant was tried if any round failed. `mark_empty`: a tenant whose round
    read no device gets the mark on its head that it has none (unless one was
    registered meanwhile), so that the stream's next heads of it run no round."""
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
        if mark_empty and not done.devices:
            try:
                pushes.mark_empty(tenant_id)
            except Exception:  # any: without the mark, the next round reads again
                logger.exception("the head of %s was not marked as without devices", tenant_id)
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
