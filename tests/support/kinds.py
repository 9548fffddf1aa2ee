"""A catalog of its own with a type using every field kind of docs/contract.md's
"Field kinds" (numbers, lists, objects, lists of objects), each with bounds.

A server serves it with SYNC_CATALOG=tests.support.kinds (SERVER_ENV).
"""

from __future__ import annotations

import enum

from api.domain.item_types import Field, FieldKind, ItemType


class Stage(enum.Enum):
    TODO = "TODO"
    DOING = "DOING"
    DONE = "DONE"


ADDRESS = (
    Field("street", max_length=100),
    Field("city", max_length=60),
    Field("postalCode", max_length=10),
    Field("floor", FieldKind.INT, minimum=-5, maximum=200),
    Field("latitude", FieldKind.FLOAT, minimum=-90, maximum=90),
    Field("doorCodes", FieldKind.LIST, of=FieldKind.STRING, max_length=8, max_items=3),
)

TASK = ItemType(
    name="Task",
    code="TASK",
    description="A task of a tracker: every field kind.",
    fields=(
        Field("title", max_length=200),
        Field("priority", FieldKind.INT, minimum=1, maximum=5),
        Field("count", FieldKind.INT),
        Field("score", FieldKind.FLOAT),
        Field("ratio", FieldKind.FLOAT, minimum=0, maximum=1),
        Field("tags", FieldKind.LIST, of=FieldKind.STRING, max_length=20, max_items=5),
        Field("ids", FieldKind.LIST, of=FieldKind.ID, max_length=64),
        Field("counts", FieldKind.LIST, of=FieldKind.INT, minimum=0),
        Field("scores", FieldKind.LIST, of=FieldKind.FLOAT),
        Field("flags", FieldKind.LIST, of=FieldKind.BOOLEAN),
        Field("days", FieldKind.LIST, of=FieldKind.DATE),
        Field("times", FieldKind.LIST, of=FieldKind.TIME),
        Field("stages", FieldKind.LIST, of=FieldKind.ENUM, enum=Stage),
        Field("address", FieldKind.OBJECT, fields=ADDRESS),
        Field(
            "checklist",
            FieldKind.LIST,
            of=FieldKind.OBJECT,
            max_items=10,
            fields=(Field("text", max_length=100), Field("done", FieldKind.BOOLEAN)),
        ),
    ),
)
DECLARED: tuple[ItemType, ...] = (TASK,)
SERVER_ENV = {"SYNC_CATALOG": "tests.support.kinds"}
