"""The API through the tools its users have: Apollo Client, GraphQL codegen, a browser."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from api.auth import make_local_token
from api.settings import PROJECT_ROOT, Settings
from tests.support import node_packages
from tests.support.gql import TEST_AUTH_SECRET, GraphQLClient, bearer
from tests.support.servers import api_server

pytestmark = pytest.mark.serial  # scripts/test --all runs it alone (pyproject.toml)

JS = Path(__file__).with_name("js")
ARTIFACTS = PROJECT_ROOT / "tests" / "artifacts"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def _run(args: list[str], cwd: Path, timeout: int = 300) -> str:
    result = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{args}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout


@pytest.fixture(scope="session")
def node_deps() -> Path:
    """js/package.json's packages at exactly the versions of its lock file (every
    transitive one too: `npm ci`), in .cache/, and the scripts beside them."""
    deps = node_packages.install(node_packages.CLIENTS)
    for name in ("*.mjs", "*.yml", "*.graphql"):
        for script in JS.glob(name):
            shutil.copy(script, deps / script.name)  # packages resolve from there
    (deps / "left_view_recipe.mjs").write_text(_left_view_recipe())
    return deps


# In Node's ES modules Apollo Client 3 is CommonJS (docs/clients.md says so): the
# recipe's one import of it is taken from there; the rest runs as the page shows it.
_APOLLO_IMPORT = 'import { ApolloLink, Observable } from "@apollo/client";'
_APOLLO_IN_NODE = (
    'import apollo from "@apollo/client/core/core.cjs";\nconst { ApolloLink, Observable } = apollo;'
)


def _left_view_recipe() -> str:
    """docs/clients.md's Apollo recipe for a record that leaves the view: the js block
    after the Apollo Client item of "When a record leaves a member's view"."""
    page = (PROJECT_ROOT / "docs" / "clients.md").read_text()
    section = page[page.index("## When a record leaves a member's view") :]
    section = section[section.index("- **Apollo Client**") :]
    start = section.index("```js\n") + len("```js\n")
    recipe = section[start : section.index("```\n", start)]
    assert recipe.startswith(_APOLLO_IMPORT + "\n"), recipe[:200]
    return recipe.replace(_APOLLO_IMPORT, _APOLLO_IN_NODE, 1)


@pytest.fixture(scope="module")
def server_url(settings: Settings) -> Iterator[str]:
    with api_server(settings) as url:
        yield url


def _token(tenant: str) -> str:
    return bearer([tenant], secret=TEST_AUTH_SECRET)["Authorization"].split()[1]


def test_apollo_client_creates_conflicts_deletes_and_syncs(
    node_deps: Path, server_url: str, tenant: str
) -> None:
    node = shutil.which("node")
    assert node
    out = _run(
        [
            node,
            "apollo_sync.mjs",
            f"{server_url}/graphql",
            _token(tenant),
            tenant,
            _token(f"{tenant}-other"),
            bearer([f"{tenant}:writer"], sub="bob", secret=TEST_AUTH_SECRET)[
                "Authorization"
            ].split()[1],
        ],
        node_deps,
    )
    report: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    assert report["conflictCode"] == "CONFLICT"
    assert report["conflictCurrentToken"] == report["updatedToken"]
    assert report["conflictCurrent"]["__typename"] == "Person"
    assert report["conflictCurrent"]["familyName"] == "Lovelace"
    assert report["deleted"]["type"] == "PERSON"
    sync = report["sync"]
    assert sync["pages"] == 2  # three entities, pages of two
    assert sorted(i["__typename"] for i in sync["items"]) == ["DeletedItem", "Person", "Person"]
    tokens = [i["changeToken"] for i in sync["items"]]
    assert tokens == sorted(tokens) and sync["changeToken"] == tokens[-1]
    # docs/clients.md's recipe: refused NOT_A_MEMBER, the cache lets go of the tenant
    # (two people and a deletion held before).
    assert report["cachedBefore"] == 3 and report["refusedReason"] == "NOT_A_MEMBER"
    assert report["cachedAfter"] == 0 and report["pagesAfter"] == 0
    # docs/clients.md's recipe for a record that left the view: Bob held the letter
    # and his edit of it offline (shown optimistically); Ann unshared it.
    lv = report["leftView"]
    assert lv["firstPage"] == ["Bo", "Cy", "Letter"], lv
    assert lv["optimistic"] == "Bob's" and lv["held"] == [1, 0], lv
    assert lv["nextPage"] == ["LeftViewItem:letter"], lv
    assert lv["refused"] == ["Update"] and lv["edit"] == {"code": "LEFT_VIEW"}, lv
    assert lv["cached"] == {"root": ["Bo", "Cy"], "optimistic": ["Bo", "Cy"]}, lv
    assert lv["firstPageRead"] == ["Bo", "Cy"], lv  # its reference to the letter dropped
    assert lv["ownerSees"] == {"__typename": "Person", "givenName": "Letter", "familyName": None}


def test_codegen_validates_the_schema_and_generates_typescript(node_deps: Path) -> None:
    out_file = node_deps / "out" / "graphql.ts"
    out_file.unlink(missing_ok=True)
    _run(
        [str(node_deps / "node_modules" / ".bin" / "graphql-codegen"), "--config", "codegen.yml"],
        node_deps,
    )
    generated = out_file.read_text()
    for expected in (
        "export type Person = SynchronizedItem",
        "export type SyncQuery",
        "export type PushMutation",
        "DeletedItemType",
    ):
        assert expected in generated, expected


@pytest.mark.skipif(
    not Path(CHROMIUM).exists(),
    reason="Debian's chromium is not installed "
    "(scripts/test installs it when run as root: apt-get install chromium)",
)
def test_graphiql_in_a_browser_runs_a_sync_offline(
    node_deps: Path, server_url: str, tenant: str, app_client: Any
) -> None:
    gql = GraphQLClient(app_client)
    gql.create(tenant, "Person", {"givenName": "Ada", "profileColor": "#3366CC"})
    gql.create(tenant, "Reminder", {"title": "Dentist", "dueAt": "2026-12-01T09:30:00Z"})
    ARTIFACTS.mkdir(exist_ok=True)
    screenshot = ARTIFACTS / "graphiql-sync.png"
    node = shutil.which("node")
    assert node
    out = _run(
        [node, "browser.mjs", server_url, _token(tenant), tenant, str(screenshot)],
        node_deps,
        timeout=180,
    )
    report = json.loads(out.strip().splitlines()[-1])
    assert '"givenName": "Ada"' in report["result"] and '"title": "Dentist"' in report["result"]
    assert report["failedRequests"] == []  # every asset came from the API itself
    assert screenshot.stat().st_size > 10_000


def test_the_graphql_over_http_audit_passes_every_check(
    node_deps: Path, server_url: str, tenant: str
) -> None:
    node = shutil.which("node")
    assert node
    out = _run([node, "audit.mjs", f"{server_url}/graphql", _token(tenant)], node_deps)
    results: list[dict[str, Any]] = json.loads(out.strip().splitlines()[-1])
    assert len(results) >= 61
    not_ok = [r for r in results if r["status"] != "ok"]
    assert not_ok == [], not_ok


# Past the first short-lived token's life (2 s), so that its connect is late.
FIRST_CONNECT_DELAY_MS = 2500


def test_graphql_ws_gets_a_poke_on_server_b_for_a_write_on_server_a(
    node_deps: Path, server_url: str, settings: Settings, tenant: str
) -> None:
    gql_first = _create_person(server_url, tenant)
    _create_person(server_url, tenant)  # so that the first token is stale
    bad = make_local_token("not-the-secret-" * 3, "s", [tenant], 600)
    node = shutil.which("node")
    assert node
    with api_server(settings) as server_b:
        ws_b = server_b.replace("http://", "ws://") + "/graphql"
        out = _run(
            [
                node,
                "subscribe.mjs",
                f"{server_url}/graphql",
                ws_b,
                _token(tenant),
                tenant,
                gql_first,
                bad,
                # The script makes its short-lived tokens itself, each just before its
                # socket connects (one made here expired before a connect that came
                # late on a busy machine: Forbidden, issue 48). The hook delays its
                # first connect past that token's 2 s, so a late connect is met every
                # run: it makes another, living twice as long.
                TEST_AUTH_SECRET,
                str(FIRST_CONNECT_DELAY_MS),
            ],
            node_deps,
            timeout=120,
        )
    report: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    stale = report["stale"]["value"]["data"]["changesAvailable"]
    assert stale["tenantID"] == tenant and stale["changeToken"] > gql_first
    # The write on server A reached the subscriber on server B, with its token.
    poked = report["crossServer"]["value"]["data"]["changesAvailable"]
    assert poked["changeToken"] == report["written"]
    assert report["foreign"]["error"][0]["extensions"]["code"] == "FORBIDDEN"
    assert "value" in report["afterForeign"]  # the connection kept serving
    assert report["noToken"]["error"]["code"] == 4403
    assert report["badToken"]["error"]["code"] == 4403
    first, *_, last = report["expiringAttempts"]
    assert first["late"] and first["close"]["code"] == 4403, report["expiringAttempts"]
    assert last["connected"] and not last["late"], report["expiringAttempts"]
    assert report["expiredClose"] == {"code": 4403, "reason": "token expired"}


def _create_person(server_url: str, tenant: str) -> str:
    """Create a person through server A; its change token."""
    response = httpx2.post(
        f"{server_url}/graphql",
        json={
            "query": "mutation($i: CreatePersonInput!) "
            "{ createPerson(input: $i) { person { changeToken } } }",
            "variables": {"i": {"tenantID": tenant, "person": {"givenName": "Ann"}}},
        },
        headers=bearer([tenant], secret=TEST_AUTH_SECRET),
    )
    token: str = response.json()["data"]["createPerson"]["person"]["changeToken"]
    return token
