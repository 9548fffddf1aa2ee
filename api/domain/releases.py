"""The catalog's releases: which release of the synchronized types this process
serves, and what each release adds (docs/evolution.md).

Every type, field and enum value carries the release that added it (`since`); a
release's catalog is the declaration without what came later. A server serves its
catalog's latest release; tests run a server of an earlier one beside it, on one
table, as a rollback or a rolling deploy does (SYNC_RELEASE), and a catalog of their
own in Python (SYNC_CATALOG, `module:attribute` of a tuple of item types). Both are
read by api.settings (`catalog_choice`) and applied here, at import, because the
GraphQL schema is built from the catalog at import.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterable
from typing import Any

from api.domain.errors import BadUserInput
from api.domain.item_types import ItemType

# A release as an app writes it in a header: digits, without a sign, a leading
# zero, spaces or underscores (which Python's int() would all take).
_DIGITS = re.compile(r"[1-9][0-9]*")


def latest(declared: Iterable[ItemType]) -> int:
    """The newest release the declaration records."""
    return max(
        [t.since for t in declared]
        + [f.since for t in declared for f in t.fields]
        + [r for t in declared for f in t.fields for _, r in f.enum_since]
    )


def at(declared: Iterable[ItemType], release: int) -> tuple[ItemType, ...]:
    """The catalog of `release`: the declaration without what later releases added."""
    return tuple(v for v in (t.at(release) for t in declared) if v is not None)


Catalog = tuple[ItemType, ...]


def served(
    declared: Catalog, module: str | None = None, chosen: int | None = None
) -> tuple[Catalog, Catalog, int]:
    """(the whole declaration, the catalog this process serves, its release):
    `declared`, or the catalog of `module` (`module:attribute`), at release `chosen`
    (None: the newest)."""
    if module:
        name, _, attribute = module.partition(":")
        declared = getattr(importlib.import_module(name), attribute or "DECLARED")
    newest = latest(declared)
    release = chosen or newest
    if not 1 <= release <= newest:
        raise ValueError(f"SYNC_RELEASE must be a recorded release, 1 to {newest}")
    return declared, at(declared, release), release


def declared(raw: Any) -> int:
    """The release an app declares, from the header's text (X-Sync-Release) or
    connection_init's JSON value (`release`): a whole number from 1, written as one
    (`2`; over a socket the number 2 too), else BAD_USER_INPUT. Not `+2`, `02`,
    ` 2 `, `1_0`, `2.0`, `2.5`, `true` or an infinity: one grammar for both
    transports, so an app's release means the same over each."""
    if isinstance(raw, str) and _DIGITS.fullmatch(raw):
        try:
            return int(raw)
        except ValueError:  # more digits than int() converts (sys.int_info)
            pass
    elif isinstance(raw, int) and not isinstance(raw, bool) and raw >= 1:
        return raw
    raise BadUserInput(
        "the app's release (the X-Sync-Release header, or `release` in connection_init's "
        "payload) must be a whole number from 1, in digits (2)"
    )
