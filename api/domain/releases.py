"""The catalog's releases: which release of the synchronized types this process
serves, and what each release adds (docs/evolution.md).

Every type, field and enum value carries the release that added it (`since`); a
release's catalog is the declaration without what came later. A server serves its
catalog's latest release; tests run a server of an earlier one beside it, on one
table, as a rollback or a rolling deploy does (SYNC_RELEASE), and a catalog of their
own (SYNC_CATALOG, `module:attribute` of a tuple of item types). Both are read here,
at import, because the GraphQL schema is built from the catalog at import.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterable

from api.domain.item_types import ItemType


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


def served(declared: Catalog) -> tuple[Catalog, Catalog, int]:
    """(the whole declaration, the catalog this process serves, its release)."""
    chosen = os.environ.get("SYNC_CATALOG")
    if chosen:
        module, _, attribute = chosen.partition(":")
        declared = getattr(importlib.import_module(module), attribute or "DECLARED")
    newest = latest(declared)
    release = int(os.environ.get("SYNC_RELEASE") or newest)
    if not 1 <= release <= newest:
        raise ValueError(f"SYNC_RELEASE must be a recorded release, 1 to {newest}")
    return declared, at(declared, release), release
