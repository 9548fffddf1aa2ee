"""The client schemas scripts/generate-clients writes (docs/clients.md, "Generated
schemas"), used by the real libraries, unmodified from npm, in Node: the family
app's WatermelonDB files through clients/watermelondb (its release 1 appSchema and
column map sync, its generated schemaMigrations upgrade a device in place to its
newest release, and a new device of that release reads what the upgraded one holds), and
its RxDB collection schemas through clients/rxdb (two devices replicate)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

from api.domain import catalog, releases
from api.settings import DEFAULT_CATALOG_FILE, PROJECT_ROOT, Settings
from scripts.generate_clients import generate
from tests.support import kinds, node_packages, rxdb
from tests.support.gql import TEST_AUTH_SECRET, bearer
from tests.support.servers import api_server

pytestmark = pytest.mark.serial  # scripts/test --all runs it alone (pyproject.toml)

MODULE = PROJECT_ROOT / "clients" / "watermelondb"
COMMITTED = DEFAULT_CATALOG_FILE.parent / "clients" / "watermelondb" / "schema.js"


@pytest.fixture(scope="module")
def module_dir() -> Path:
    deps = node_packages.install(node_packages.WATERMELONDB)
    shutil.copy(MODULE / "index.js", deps / "index.js")
    generated = deps / "test" / "generated"
    generated.mkdir(parents=True, exist_ok=True)
    shutil.copy(MODULE / "test" / "generated.mjs", deps / "test" / "generated.mjs")
    # Release 1 as an app not upgraded yet generates it; the newest (3) as committed.
    (generated / "family-1.js").write_text(
        generate(DEFAULT_CATALOG_FILE, 1)["watermelondb/schema.js"]
    )
    shutil.copy(COMMITTED, generated / "family-2.js")
    shutil.copy(
        kinds.FILE.parent / "clients" / "watermelondb" / "schema.js", generated / "tasks-1.js"
    )
    return deps


def _watermelondb(module_dir: Path, settings: Settings, app: str) -> dict[str, Any]:
    tenant = f"gen-{uuid.uuid4().hex[:8]}"
    token = bearer([tenant], secret=TEST_AUTH_SECRET)["Authorization"].split()[1]
    node = shutil.which("node")
    assert node
    env = kinds.SERVER_ENV if app == "tasks" else {}
    with api_server(settings, extra_env=env) as url:
        done = subprocess.run(
            [node, "test/generated.mjs", f"{url}/graphql", token, tenant, app],
            cwd=module_dir,
            env=dict(os.environ),
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr[-3000:]
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


@pytest.fixture(scope="module")
def findings(module_dir: Path, settings: Settings) -> dict[str, Any]:
    return _watermelondb(module_dir, settings, "family")


def test_the_generated_schemas_sync_migrate_and_converge(findings: dict[str, Any]) -> None:
    assert findings["oldTables"] == ["person", "reminder"]  # release 1: no Member yet
    assert findings["rejected"] == []
    ann = findings["ann"]
    person = findings["upgradedPeople"][ann]
    assert (person["given_name"], person["relationship"]) == ("Ann", "PARTNER")
    assert person["change_token"]  # synced
    # The committed file is the newest release's (4: release 2 added the Member table,
    # release 3 an enum value, no column, release 4 Member's groups column), migrated to
    # from release 1 in place.
    assert findings["upgradedVersion"] == releases.latest(catalog.DECLARED) == 4
    assert findings["upgradedMembers"] == {}  # the table release 2 added, by migration
    # A new device of release 2 holds exactly what the upgraded one does.
    assert findings["freshPeople"] == findings["upgradedPeople"]
    assert findings["freshReminders"] == findings["upgradedReminders"]
    (reminder,) = findings["freshReminders"].values()
    assert (reminder["title"], reminder["person_id"], reminder["completed"]) == ("milk", ann, False)


def test_the_task_trackers_generated_watermelondb_schema_syncs_lists_and_objects(
    module_dir: Path, settings: Settings
) -> None:
    found = _watermelondb(module_dir, settings, "tasks")
    assert found["rejected"] == []
    assert found["phone"] == found["tablet"]
    fence = found["phone"]["fence"]
    assert fence["priority"] == 5 and fence["score"] == 0.1
    # JSON-encoded columns, as the module writes what a pull brings.
    assert json.loads(fence["tags"]) == ["home", "Zoë"]
    assert json.loads(fence["counts"]) == [0, 2147483647]
    assert json.loads(fence["address"]) == {"city": "Lyon"}  # an object: one value
    assert json.loads(fence["checklist"]) == [{"text": "buy paint", "done": False}]


@pytest.fixture(scope="module")
def rxdb_dir() -> Path:
    deps = rxdb.install()
    generated = deps / "test" / "generated"
    generated.mkdir(parents=True, exist_ok=True)
    for app in ("family", "tasks"):
        schemas = PROJECT_ROOT / "examples" / app / "clients" / "rxdb" / "schemas.json"
        shutil.copy(schemas, generated / f"{app}.json")
    return deps


def _rxdb(rxdb_dir: Path, settings: Settings, app: str, env: dict[str, str]) -> dict[str, Any]:
    tenant = f"gen-{uuid.uuid4().hex[:8]}"
    token = bearer([tenant], secret=TEST_AUTH_SECRET)["Authorization"].split()[1]
    release = "2" if app == "family" else "1"
    with api_server(settings, extra_env=env) as url:
        done = subprocess.run(
            [rxdb.NODE, "test/generated.mjs", f"{url}/graphql", token, tenant, release, app],
            cwd=rxdb_dir,
            env=rxdb.node_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr[-3000:]
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def test_the_generated_rxdb_schemas_replicate_between_two_devices(
    rxdb_dir: Path, settings: Settings
) -> None:
    found = _rxdb(rxdb_dir, settings, "family", {})
    assert found["errors"] == []
    assert found["phone"] == found["tablet"]
    assert found["phone"]["people"]["ann"] == {
        "id": "ann",
        "givenName": "Ann",
        "relationship": "PARTNER",
        "profileColor": "#112233",
        "occupation": "pilot",
    }
    assert found["tablet"]["reminders"]["milk"] == {
        "id": "milk",
        "title": "milk",
        "personID": "ann",
        "completed": True,
        "dueAt": "2026-12-01T08:00:00.000Z",
    }


def test_the_task_trackers_generated_rxdb_schemas_replicate_every_kind(
    rxdb_dir: Path, settings: Settings
) -> None:
    found = _rxdb(rxdb_dir, settings, "tasks", kinds.SERVER_ENV)
    assert found["errors"] == []
    assert found["phone"] == found["tablet"]
    assert found["phone"]["projects"]["house"]["memberIDs"] == ["u1", "u2"]
    assert found["tablet"]["tasks"]["fence"] == {
        "id": "fence",
        "title": "paint the fence",
        "priority": 5,
        "score": 0.1,
        "tags": ["home", "Zoë"],
        "counts": [0, 2147483647],
        "flags": [True, False],
        "days": ["2024-02-29"],
        "stages": ["TODO", "DONE"],
        "address": {"city": "Lyon"},  # an object is one value: replaced whole
        "checklist": [],
    }
