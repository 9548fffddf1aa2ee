"""Conflict rebase (pure): the server's version plus the local changes it did not also make."""

from __future__ import annotations

from typing import Any


def rebase(
    base: dict[str, Any], current: dict[str, Any], local_changes: dict[str, Any]
) -> dict[str, Any]:
    """Local changes still worth sending on top of `current`.

    `base` is the version the local edit started from. A field the server also
    changed since then keeps the server's value (server wins on a true conflict);
    a field only changed locally is re-applied; a change that already equals the
    server's value is dropped.
    """
    rebased = {}
    for name, value in local_changes.items():
        server_changed = base.get(name) != current.get(name)
        if not server_changed and current.get(name) != value:
            rebased[name] = value
    return rebased
