"""An RxDB device (clients/rxdb, the real `rxdb` package in Node 22,
test/cursor_refused.mjs) when a server refuses the cursor in its checkpoint
(INVALID_CURSOR): two servers on one table whose CURSOR_SECRETs differ, behind one
address that moves to the other right after handing out a cursor
(tests/support/switch_proxy.py). The pull is asked again without the cursor, from
the checkpoint's token (a first sync, which has none: downloaded again as a resync);
the device ends with exactly the server's state, its offline edits pushed
(docs/evolution.md, "Served by an older server")."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from api.settings import Settings
from tests.support import rxdb
from tests.support.gql import TEST_AUTH_SECRET, bearer
from tests.support.servers import api_server
from tests.support.switch_proxy import SwitchProxy

PREFIX = f"rxc-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def run(settings: Settings) -> Iterator[tuple[dict[str, Any], SwitchProxy]]:
    module_dir: Path = rxdb.install()
    tenants = [f"{PREFIX}-{kind}" for kind in ("incremental", "twice", "first", "catchup")]
    token = bearer(tenants, secret=TEST_AUTH_SECRET)["Authorization"].split()[1]
    with (
        api_server(settings, extra_env={"CURSOR_SECRET": "a" * 40}) as a,
        api_server(settings, extra_env={"CURSOR_SECRET": "b" * 40}) as b,
        SwitchProxy(a, b) as proxy,
    ):
        result = subprocess.run(
            [rxdb.NODE, "test/cursor_refused.mjs", proxy.url, f"{a}/graphql", token, PREFIX],
            cwd=module_dir,
            env=rxdb.node_env(),
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        data: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
        for name, findings in data.items():
            assert "failed" not in findings, (name, findings.get("failed", ""))
        yield data, proxy


def _pages(proxy: SwitchProxy, kind: str) -> list[tuple[str | None, str | None, str | None]]:
    """The `changes` requests of a scenario's tenant: (since, cursor, error code)."""
    return [(p.since, p.cursor, p.code) for p in proxy.requests("changes", f"{PREFIX}-{kind}")]


def test_a_cursor_refused_between_two_pages_is_asked_again_from_the_checkpoints_token(
    run: tuple[dict[str, Any], SwitchProxy],
) -> None:
    report, proxy = run
    found = report["incremental"]
    assert found["before"] and found["synced"], found
    assert found["docs"] == found["server"], found  # p000, deleted between the pages, gone
    assert "p000" not in found["server"] and len(found["server"]) == 551, found
    assert found["server"]["first"] == ["first", "edited offline"]
    assert found["server"]["offline"] == ["made offline", None]
    assert found["resyncs"] == 0 and "INVALID_CURSOR" not in found["errors"], found
    pages = _pages(proxy, "incremental")
    assert [code for *_, code in pages].count("INVALID_CURSOR") == 1, pages
    refused = next(n for n, (*_, code) in enumerate(pages) if code == "INVALID_CURSOR")
    since, cursor, _ = pages[refused + 1]
    assert cursor is None and since is not None, pages  # the checkpoint's token
    # The tenant downloaded once: by the device's first sync, not again.
    assert [p[:2] for p in pages].count((None, None)) == 1, pages


def test_a_second_refusal_in_one_pull_is_reported_and_the_next_try_ends_it(
    run: tuple[dict[str, Any], SwitchProxy],
) -> None:
    """Servers alternating at each page: asked again once at once; refused again,
    the pull fails (error$: INVALID_CURSOR) and RxDB's retry asks from the token."""
    report, proxy = run
    found = report["twice"]
    assert found["synced"] and found["docs"] == found["server"], found
    assert found["errors"].count("INVALID_CURSOR") == 1 and found["resyncs"] == 0, found
    pages = _pages(proxy, "twice")
    assert [code for *_, code in pages].count("INVALID_CURSOR") == 2, pages
    assert [p[:2] for p in pages].count((None, None)) == 1, pages


def test_a_first_sync_refused_midway_downloads_the_tenant_again_as_a_resync(
    run: tuple[dict[str, Any], SwitchProxy],
) -> None:
    """Its first page's documents are stored; asked again from no token, a first
    sync leaves p000's deletion out: only a resync (documents it did not return are
    deleted) drops it."""
    report, proxy = run
    found = report["firstSync"]
    assert found["synced"] and found["resyncs"] == 1, found
    assert "p000" not in found["docs"] and "p001" not in found["docs"], found
    assert found["docs"] == found["server"] and len(found["server"]) == 248, found
    pages = _pages(proxy, "first")
    assert [code for *_, code in pages].count("INVALID_CURSOR") == 1, pages


def test_a_catch_up_cursor_refused_starts_the_catch_up_again(
    run: tuple[dict[str, Any], SwitchProxy],
) -> None:
    """The collection's schema version 1 adds phoneNumber: the first pull after the
    migration catches up on 250 phone numbers in pages; its second page refused, the
    catch-up starts again within that pull, no failed pull on error$."""
    report, proxy = run
    found = report["catchUp"]
    assert found["before"] and found["synced"], found
    assert found["people"] == found["phones"] == 250 and found["caughtUp"] == 250, found
    assert found["errors"] == [] and found["resyncs"] == 0, found
    catch_ups = proxy.requests("catchUp", f"{PREFIX}-catchup")
    assert [c.code for c in catch_ups].count("INVALID_CURSOR") == 1, catch_ups
    assert [p[:2] for p in _pages(proxy, "catchup")].count((None, None)) == 1
