"""The second shipped example app, a task tracker (examples/tasks/catalog.yaml),
loaded from its file: its Task type has a field of every kind of docs/contract.md's
"Field kinds" (numbers, lists, objects, lists of objects), each with bounds, and
its Project type the scalar kinds a list does not hold (Color, Attachment).

A server serves it with SYNC_CATALOG_FILE set to the file (SERVER_ENV).
"""

from __future__ import annotations

import enum

from api.domain import catalog
from api.domain.catalog_file import load
from api.domain.item_types import Field, ItemType
from api.settings import PROJECT_ROOT

FILE = PROJECT_ROOT / "examples" / "tasks" / "catalog.yaml"
APP = load(FILE, reserved=catalog.BUILTIN)
PROJECT, TASK = APP.types
_BY_NAME = {f.name: f for f in TASK.fields}
assert _BY_NAME["stages"].enum is not None
Stage: type[enum.Enum] = _BY_NAME["stages"].enum
ADDRESS: tuple[Field, ...] = _BY_NAME["address"].fields
# The Task type alone at the tracker's release 1 (before its Ref, Task.projectID), as
# the kinds' evolution tests record it.
_TASK_1 = TASK.at(1)
assert _TASK_1 is not None
TASK_1: ItemType = _TASK_1
DECLARED: tuple[ItemType, ...] = (TASK_1,)
# Every type a server of the app serves (its own and the API's).
ALL: tuple[ItemType, ...] = catalog.declared_by(APP)
# The file as the tracker's release 1 declared it: without its release 2's Ref
# (Task.projectID, the file's last field), for tests that add a release 2 of their own.
RELEASE_1_TEXT = FILE.read_text().split("      projectID:\n")[0]
assert "since: 2" not in RELEASE_1_TEXT
SERVER_ENV = {"SYNC_CATALOG_FILE": str(FILE)}
