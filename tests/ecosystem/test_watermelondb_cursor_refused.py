"""A WatermelonDB device (clients/watermelondb, WatermelonDB from npm in Node,
test/cursor_refused.mjs) when a server refuses the cursor of its position
(INVALID_CURSOR): two servers on one table whose CURSOR_SECRETs differ, behind one
address that moves to the other right after handing out a cursor
(tests/support/switch_proxy.py). The read is asked again from its token
(`lastPulledAt`'s position), not the whole tenant with a replacement; a first sync
not finished, which has no token, is read again as a resync. The device ends with
exactly the server's state, its local edits pushed (docs/evolution.md, "Served by an
older server")."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from api.settings import PROJECT_ROOT, Settings
from tests.support import node_packages
from tests.support.gql import TEST_AUTH_SECRET, bearer
from tests.support.servers import api_server
from tests.support.switch_proxy import SwitchProxy

MODULE = PROJECT_ROOT / "clients" / "watermelondb"
DEPS = node_packages.WATERMELONDB.target
PREFIX = f"wmc-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def run(settings: Settings) -> Iterator[tuple[dict[str, Any], SwitchProxy]]:
    node_packages.install(node_packages.WATERMELONDB)
    shutil.copy(MODULE / "index.js", DEPS / "index.js")
    (DEPS / "test").mkdir(exist_ok=True)
    shutil.copy(MODULE / "test" / "cursor_refused.mjs", DEPS / "test" / "cursor_refused.mjs")
    tenants = [f"{PREFIX}-{kind}" for kind in ("incremental", "twice", "first", "catchup")]
    token = bearer(tenants, secret=TEST_AUTH_SECRET)["Authorization"].split()[1]
    node = shutil.which("node")
    assert node
    with (
        api_server(settings, extra_env={"CURSOR_SECRET": "a" * 40}) as a,
        api_server(settings, extra_env={"CURSOR_SECRET": "b" * 40}) as b,
        SwitchProxy(a, b) as proxy,
    ):
        result = subprocess.run(
            [node, "test/cursor_refused.mjs", proxy.url, f"{a}/graphql", token, PREFIX],
            cwd=DEPS,
            env=dict(os.environ),
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


def test_a_cursor_refused_between_two_pages_is_asked_again_from_the_reads_token(
    run: tuple[dict[str, Any], SwitchProxy],
) -> None:
    report, proxy = run
    found = report["incremental"]
    assert found["before"] is True and "stats" in found["synced"], found
    stats = found["synced"]["stats"]
    assert stats["resyncs"] == 0 and found["resyncs"] == 0, found
    # Page 1 again and the rest of the read (250 people, p000's deletion, the two
    # records pushed): not the 300 people the device held before (its counts are
    # the client's since it started: its first sync's too).
    assert stats["items"] - found["itemsBefore"] <= 100 + 253, (stats, found["itemsBefore"])
    assert found["docs"] == found["server"] and not found["unsynced"], found
    assert "p000" not in found["server"] and len(found["server"]) == 551, found
    assert found["server"]["first"] == ["first", "edited offline"]
    assert found["server"]["offline"] == ["made offline", None]
    pages = _pages(proxy, "incremental")
    assert [code for *_, code in pages].count("INVALID_CURSOR") == 1, pages
    refused = next(n for n, (*_, code) in enumerate(pages) if code == "INVALID_CURSOR")
    since, cursor, _ = pages[refused + 1]
    assert cursor is None and since is not None, pages  # the read's token
    # The tenant downloaded once: by the device's first sync, not again.
    assert [p[:2] for p in pages].count((None, None)) == 1, pages


def test_a_second_refusal_in_one_sync_is_its_error_and_the_next_sync_ends_it(
    run: tuple[dict[str, Any], SwitchProxy],
) -> None:
    """Servers alternating at each page: no loop, and no edit lost."""
    report, proxy = run
    found = report["twice"]
    assert found["synced"] == {"error": "INVALID_CURSOR"}, found
    assert found["again"]["stats"]["resyncs"] == 0 and found["resyncs"] == 0, found
    assert found["docs"] == found["server"] and not found["unsynced"], found
    assert found["server"]["offline"] == ["made offline", None]
    # Refused twice in the first call (its error); the next call sends the cursor its
    # position still holds, refused by the other server too, and reads from the token.
    pages = _pages(proxy, "twice")
    assert [code for *_, code in pages].count("INVALID_CURSOR") == 3, pages
    assert [p[:2] for p in pages].count((None, None)) == 1, pages


def test_a_first_sync_refused_midway_is_read_again_as_a_resync(
    run: tuple[dict[str, Any], SwitchProxy],
) -> None:
    """Page 1 applied by an earlier synchronize() call; read again from no token, a
    first sync leaves p000's deletion out: only the replacement drops it."""
    report, proxy = run
    found = report["firstSync"]
    assert "stats" in found["synced"] and found["resyncs"] == 1, found
    assert "p000" not in found["docs"] and "p001" not in found["docs"], found
    assert found["docs"] == found["server"] and len(found["server"]) == 248, found
    pages = _pages(proxy, "first")
    assert [code for *_, code in pages].count("INVALID_CURSOR") == 1, pages


def test_a_catch_up_cursor_refused_starts_the_catch_up_again(
    run: tuple[dict[str, Any], SwitchProxy],
) -> None:
    """A migration sync (schema version 2 adds the occupation column) catches up on
    250 occupations in pages; its second page refused, the catch-up starts again in
    the same call, and nothing else is read again."""
    report, proxy = run
    found = report["catchUp"]
    assert "stats" in found["synced"], found
    assert found["synced"]["stats"]["resyncs"] == 0, found
    assert found["people"] == found["occupations"] == 250, found
    catch_ups = proxy.requests("catchUp", f"{PREFIX}-catchup")
    assert [c.code for c in catch_ups].count("INVALID_CURSOR") == 1, catch_ups
    assert [p[:2] for p in _pages(proxy, "catchup")].count((None, None)) == 1
