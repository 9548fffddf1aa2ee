"""A new app built from nothing but the docs (docs/evolution.md, "An app's data";
docs/clients.md, "Generated schemas"), outside the API's checkout: its folder with a
catalog using every kind, its release recorded by scripts/record-release, a second
release adding a field of each new kind recorded too (the evolution check passes),
each release's client schemas generated, and the app served from its file. Devices
of each release (the reference client, with their generated ClientSchema) edit
offline, conflict and converge, and an old device upgraded in place catches up on
what its release skipped."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sync_client import HttpTransport, SyncClient
from sync_client.schema import ClientSchema

from api.settings import PROJECT_ROOT, Settings
from tests.support import kinds
from tests.support.gql import bearer
from tests.support.servers import api_server

pytestmark = pytest.mark.slow  # the scripts, and a server process of its own

# Release 2: a field of each new kind on Task.
RELEASE_2 = (
    "      estimate: {kind: Int, minimum: 0, maximum: 1000, since: 2}\n"
    "      weight: {kind: Float, minimum: 0, since: 2}\n"
    "      labels: {kind: List, of: String, maxLength: 10, maxItems: 3, since: 2}\n"
    "      place:\n        kind: Object\n        since: 2\n"
    "        fields: {city: {kind: String, maxLength: 60}, floor: {kind: Int}}\n"
    "      project: {kind: Ref, type: Project, since: 2}\n"
)


def _script(app: Path, name: str, *args: str) -> str:
    env = {**os.environ, "SYNC_CATALOG_FILE": str(app / "catalog.yaml")}
    env = {k: v for k, v in env.items() if not k.startswith("PYTEST_")}
    done = subprocess.run(
        [str(PROJECT_ROOT / "scripts" / name), *args],
        env=env,
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"{name} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("new-app")
    first = kinds.RELEASE_1_TEXT  # the tracker's release 1; this app's 2 is its own
    (folder / "catalog.yaml").write_text(first)
    _script(folder, "export-schema")
    assert "wrote" in _script(folder, "record-release")
    # Release 2, following the docs: fields with `since: 2`, then the same two scripts.
    title = "      title: {kind: String, maxLength: 200}\n"
    (folder / "catalog.yaml").write_text(first.replace(title, title + RELEASE_2))
    _script(folder, "export-schema")
    recorded = _script(folder, "record-release")
    assert f"{folder / 'releases' / '2.json'}" in recorded, recorded
    for release in ("1", "2"):
        out = folder / f"clients-{release}"
        _script(folder, "generate-clients", "--release", release, "--out", str(out))
    return folder


@pytest.fixture(scope="module")
def url(app: Path, settings: Settings) -> Iterator[str]:
    with api_server(settings, extra_env={"SYNC_CATALOG_FILE": str(app / "catalog.yaml")}) as at:
        yield at


def _device(app: Path, url: str, path: Path, tenant: str, release: int) -> SyncClient:
    schema = ClientSchema.load(app / f"clients-{release}" / "python" / "client_schema.json")
    assert schema.release == release
    token = bearer([tenant])["Authorization"].split()[1]
    return SyncClient(path, tenant, HttpTransport(url, token), schema=schema)


def _set(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _set(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_set(v) for v in value]
    return value


def test_the_apps_files_are_where_the_docs_say(app: Path) -> None:
    assert sorted(p.name for p in (app / "releases").iterdir()) == [
        "1.graphql",
        "1.json",
        "2.graphql",
        "2.json",
    ]
    assert "estimate: Int" in (app / "clients-2" / "schema.graphql").read_text()
    assert "estimate" not in (app / "clients-1" / "schema.graphql").read_text()
    assert (app / "clients-2" / "schema.graphql").read_text() == (
        app / "schema.graphql"
    ).read_text()
    assert (app / "clients-1" / "schema.graphql").read_text() == (
        app / "releases" / "1.graphql"
    ).read_text()


def test_devices_of_both_releases_converge_and_an_upgrade_catches_up(
    app: Path, url: str, tmp_path: Path, tenant: str
) -> None:
    old = _device(app, url, tmp_path / "old.sqlite3", tenant, 1)
    new = _device(app, url, tmp_path / "new.sqlite3", tenant, 2)
    project = old.create("Project", {"name": "House"})
    task = old.create("Task", {"title": "fence", "tags": ["home"], "priority": 2})
    old.sync()
    new.sync()
    # Both offline: the old app renames it; the new app renames it too and sets
    # release 2's fields, which the old app does not know.
    old.update(task, {"title": "paint the fence", "address": {"city": "Paris"}})
    new.update(
        task,
        {"title": "fence!", "estimate": 3, "weight": 2.5, "labels": ["diy"]}
        | {"place": {"city": "Lyon", "floor": 2}, "project": project},
    )
    assert old.sync().applied == 1
    assert new.sync().conflicts == 1
    old.sync()
    seen_old = old.get(task)
    assert seen_old is not None and "estimate" not in seen_old  # a field of release 2
    assert _set(seen_old) == {
        "__typename": "Task",
        "title": "paint the fence",  # the server's, which the old app wrote first
        "tags": ["home"],
        "priority": 2,
        "address": {"city": "Paris"},
    }
    # The old device, upgraded in place to release 2: it catches up on the fields its
    # release skipped, and holds what the new device holds.
    old.close()
    upgraded = _device(app, url, tmp_path / "old.sqlite3", tenant, 2)
    upgraded.sync()
    assert upgraded.get(task) == new.get(task)
    assert _set(upgraded.get(task)) == {
        **_set(seen_old),
        "estimate": 3,
        "weight": 2.5,
        "labels": ["diy"],
        "place": {"city": "Lyon", "floor": 2},
        "project": project,
    }
