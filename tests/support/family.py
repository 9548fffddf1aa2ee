"""The shipped example app's types (examples/family/catalog.yaml), as the tests and
the benchmarks use them: loaded from its file, as a server of it serves them."""

from __future__ import annotations

import enum

from api.domain import catalog
from api.domain.item_types import ItemType

PERSON: ItemType = catalog.BY_NAME["Person"]
REMINDER: ItemType = catalog.BY_NAME["Reminder"]
MEMBER: ItemType = catalog.MEMBER
_RELATIONSHIP = next(f for f in PERSON.fields if f.name == "relationship")
assert _RELATIONSHIP.enum is not None
RelationshipType: type[enum.Enum] = _RELATIONSHIP.enum
