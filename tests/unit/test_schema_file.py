"""The committed schema.graphql is the schema the server serves."""

from __future__ import annotations

import os
import subprocess
import sys

from api.graphql.schema import default_schema
from api.settings import PROJECT_ROOT
from scripts.release_record import schema_file


def test_committed_schema_matches_the_served_schema() -> None:
    committed = (PROJECT_ROOT / "schema.graphql").read_text()
    assert committed.strip() == default_schema().as_str().strip(), (
        "schema.graphql is out of date: run scripts/export-schema"
    )


def test_schema_has_the_contract_names() -> None:
    printed = default_schema().as_str()
    for fragment in (
        "directive @isAuthenticated on FIELD_DEFINITION",
        "directive @hexColor on INPUT_FIELD_DEFINITION",
        "interface SynchronizedItem",
        "type Person implements SynchronizedItem",
        "type DeletedItem implements SynchronizedItem",
        "profileColor: String @hexColor",
        "  ): SynchronizedItemList! @isAuthenticated",  # changes(...), checked below
        "changesAvailable(tenantID: ID!, since: ID): ChangesAvailable! @isAuthenticated",
        "type ChangesAvailable {\n  tenantID: ID!",
        "person(tenantID: ID!, id: ID!): Person @isAuthenticated",
        "createPerson(input: CreatePersonInput!): CreatePersonPayload! @isAuthenticated",
        "updatePerson(input: UpdatePersonInput!): UpdatePersonPayload! @isAuthenticated",
        "deletePerson(input: DeletePersonInput!): DeletePersonPayload! @isAuthenticated",
        "scalar Time",
        "scalar Date",
    ):
        assert fragment in printed, fragment


def test_changes_keeps_the_contracts_arguments_and_adds_only_optional_ones() -> None:
    changes = default_schema()._schema.query_type.fields["changes"]  # type: ignore[union-attr]
    arguments = {name: str(arg.type) for name, arg in changes.args.items()}
    contract = {"tenantID": "ID!", "since": "ID", "cursor": "String", "limit": "Int"}
    assert list(arguments)[:4] == list(contract)
    assert {k: arguments[k] for k in contract} == contract
    assert all(not t.endswith("!") for k, t in arguments.items() if k not in contract)
    assert str(changes.type) == "SynchronizedItemList!"


def test_every_shipped_apps_committed_schema_is_the_schema_its_server_serves() -> None:
    for app in sorted((PROJECT_ROOT / "examples").glob("*/catalog.yaml")):
        served = subprocess.run(
            [
                sys.executable,
                "-c",
                "from api.graphql.schema import default_schema as s; print(s().as_str())",
            ],
            env={**os.environ, "SYNC_CATALOG_FILE": str(app)},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        committed = schema_file(app).read_text()
        assert committed.strip() == served.strip(), (
            f"{schema_file(app)} is out of date: SYNC_CATALOG_FILE={app} scripts/export-schema"
        )
