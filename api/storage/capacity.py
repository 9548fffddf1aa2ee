"""The DynamoDB capacity a piece of work consumes, as DynamoDB reports it
(`ReturnConsumedCapacity`, which every call of this package asks for): a meter
open around the work adds up the read and write units of each call made in its
context (its thread, or task). Meters nest: an inner one counts for the outer
too. What an export call holds itself to (`api.service.exports`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from api.storage.reads import connection

_WRITES = frozenset({"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"})


@dataclass
class Meter:
    read_units: float = 0.0
    write_units: float = 0.0
    calls: int = 0


_open: ContextVar[tuple[Meter, ...]] = ContextVar("capacity_meters", default=())


@contextmanager
def metered() -> Iterator[Meter]:
    """A meter of the DynamoDB calls made in this context until the block ends."""
    _install()
    meter = Meter()
    reset = _open.set((*_open.get(), meter))
    try:
        yield meter
    finally:
        _open.reset(reset)


def _install() -> None:
    # Registered once per client (the unique id); a client made anew gets it again.
    connection().client.meta.events.register(
        "after-call.dynamodb", _count, unique_id=f"{__name__}._count"
    )


def _count(parsed: dict[str, Any] | None = None, model: Any = None, **_: Any) -> None:
    meters = _open.get()
    if not meters:
        return
    consumed = (parsed or {}).get("ConsumedCapacity")
    entries = consumed if isinstance(consumed, list) else [consumed] if consumed else []
    units = sum(float(e.get("CapacityUnits", 0)) for e in entries)
    write = getattr(model, "name", None) in _WRITES
    for meter in meters:
        meter.calls += 1
        if write:
            meter.write_units += units
        else:
            meter.read_units += units
