"""scripts/generate-clients (docs/clients.md, "Generated schemas"): each client's
schema follows from an app's catalog for a release; the shipped examples' committed
files are what it writes (scripts/check fails on a stale one), and a release that
adds a field of each kind gives the WatermelonDB migration step and the RxDB
collection version that add it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from sync_client.schema import ClientSchema

from api.domain import catalog
from api.domain.catalog_file import load as load_catalog
from api.settings import PROJECT_ROOT
from scripts.generate_clients import generate, main
from tests.support import kinds

EXAMPLES = sorted((PROJECT_ROOT / "examples").glob("*/catalog.yaml"))


@pytest.mark.parametrize("app", EXAMPLES, ids=lambda p: p.parent.name)
def test_the_shipped_apps_generated_files_are_fresh(app: Path) -> None:
    out = app.parent / "clients"
    assert main(["--catalog", str(app), "--out", str(out), "--app-schema", "--check"]) == 0


def test_a_stale_generated_file_fails_the_check_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "clients"
    shutil.copytree(kinds.FILE.parent / "clients", out)
    schemas = out / "rxdb" / "schemas.json"
    edited = json.loads(schemas.read_text())
    del edited["Task"]["properties"]["tags"]  # an app's hand edit, or a catalog change
    schemas.write_text(json.dumps(edited, indent=2) + "\n")
    assert main(["--catalog", str(kinds.FILE), "--out", str(out), "--app-schema", "--check"]) == 1
    assert f"{schemas} is not what the catalog gives" in capsys.readouterr().err


def test_the_generated_client_schema_is_the_one_the_catalog_gives() -> None:
    for path, declared in (
        (PROJECT_ROOT / "examples" / "family", catalog.DECLARED),
        (kinds.FILE.parent, kinds.ALL),
    ):
        loaded = ClientSchema.load(path / "clients" / "python" / "client_schema.json")
        # The app's visibilitySince: its releases from it on select LeftViewItem.
        visibility = load_catalog(path / "catalog.yaml", reserved=catalog.BUILTIN).visibility_since
        built = ClientSchema.of(declared, None, visibility)
        assert loaded.release == built.release
        for release in range(1, built.release + 1):
            assert loaded.at(release).pull == built.at(release).pull
            assert loaded.at(release).push == built.at(release).push
        assert loaded.added_since(1) == built.added_since(1)
    # The family app's newest schema is the repository's root schema.graphql, one file.
    family = PROJECT_ROOT / "examples" / "family" / "catalog.yaml"
    assert generate(family, None)["schema.graphql"] == (PROJECT_ROOT / "schema.graphql").read_text()
    assert not (family.parent / "schema.graphql").exists()
    assert not (family.parent / "clients" / "schema.graphql").exists()


def _second_release(tmp_path: Path) -> Path:
    """The task tracker with a release 2 adding a field of each new kind to Task."""
    text = kinds.FILE.read_text().replace(
        "      title: {kind: String, maxLength: 200}\n",
        "      title: {kind: String, maxLength: 200}\n"
        "      estimate: {kind: Int, minimum: 0, since: 2}\n"
        "      weight: {kind: Float, since: 2}\n"
        "      labels: {kind: List, of: String, maxLength: 10, maxItems: 3, since: 2}\n"
        "      place:\n        kind: Object\n        since: 2\n"
        "        fields: {city: {kind: String, maxLength: 60}}\n",
    )
    path = tmp_path / "catalog.yaml"
    path.write_text(text)
    return path


def test_a_release_adding_a_field_of_each_kind_gives_its_migration_and_versions(
    tmp_path: Path,
) -> None:
    files = generate(_second_release(tmp_path), None)
    watermelon = files["watermelondb/schema.js"]
    assert "version: 2," in watermelon
    step = watermelon[watermelon.index("{ toVersion: 2") :]
    step = step[: step.index("] },")]
    assert 'addColumns({ table: "task", columns: [' in step
    for column in (
        '{"name": "estimate", "type": "number", "isOptional": true}',
        '{"name": "weight", "type": "number", "isOptional": true}',
        '{"name": "labels", "type": "string", "isOptional": true}',  # JSON-encoded
        '{"name": "place", "type": "string", "isOptional": true}',
    ):
        assert column in step
    assert "project" not in step  # Project did not change
    assert '"fieldReleases": {\n      "estimate": 2,' in watermelon
    rxdb = json.loads(files["rxdb/schemas.json"])
    assert (rxdb["Task"]["version"], rxdb["Project"]["version"]) == (1, 0)
    assert rxdb["Task"]["properties"]["labels"] == {
        "type": "array",
        "maxItems": 3,
        "items": {"type": "string", "maxLength": 10},
    }
    assert rxdb["Task"]["properties"]["estimate"] == {"type": "integer", "minimum": 0}
    assert "estimate: Int" in files["schema.graphql"]
    # Release 1 of the same file: what an app not upgraded yet generates.
    first = generate(_second_release(tmp_path), 1)
    assert (
        "estimate" not in first["schema.graphql"]
        and "toVersion" not in first["watermelondb/schema.js"]
    )
    assert first["schema.graphql"] == (kinds.FILE.parent / "schema.graphql").read_text()


def test_a_release_adding_only_an_enum_value_changes_no_collection_or_table(
    tmp_path: Path,
) -> None:
    path = tmp_path / "catalog.yaml"
    text = kinds.FILE.read_text()
    assert "values: [TODO, DOING, DONE]" in text
    path.write_text(
        text.replace("[TODO, DOING, DONE]", "[TODO, DOING, DONE, {name: LATER, since: 2}]")
    )
    files = generate(path, None)
    rxdb = json.loads(files["rxdb/schemas.json"])
    assert {name: schema["version"] for name, schema in rxdb.items()} == dict.fromkeys(rxdb, 0)
    watermelon = files["watermelondb/schema.js"]
    assert "version: 2," in watermelon and "{ toVersion: 2, steps: [\n    ] }" in watermelon
    assert "  LATER\n" in files["schema.graphql"]
