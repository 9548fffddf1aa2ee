"""Two simulated devices edit offline, reconnect, conflict and converge, narrated.

Uses the server on http://127.0.0.1:$PORT (default 8000) when it is up (tokens
signed with SYNC_AUTH_SECRET, as scripts/serve checks them); otherwise starts a
throwaway DynamoDB Local and server of its own.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sync_client import HttpTransport, SyncClient
from sync_client.client import PushOutcome

from api.auth import make_local_token
from api.settings import Settings
from api.storage.table import ensure_table
from scripts.local_engine import LocalEngine, free_port


def say(text: str) -> None:
    print(text, flush=True)


@contextlib.contextmanager
def server() -> Iterator[tuple[str, str]]:
    settings = Settings.from_env()
    url = f"http://127.0.0.1:{settings.port}"
    try:
        urllib.request.urlopen(f"{url}/healthz", timeout=2).close()
        say(f"Using the server already running on {url}.")
        yield url, settings.auth_secret
        return
    except OSError:
        pass
    say("No server on that port: starting a throwaway DynamoDB Local and API server.")
    from tests.support.servers import api_server

    with LocalEngine(free_port(), None, short_lived=True) as engine:
        local = dataclasses.replace(settings, dynamodb_endpoint=engine.endpoint)
        ensure_table(local.dynamodb_client(), local.table_name)
        with api_server(local) as own_url:
            yield own_url, local.auth_secret


def show(name: str, client: SyncClient) -> None:
    items = client.items()
    if not items:
        say(f"    {name} holds nothing.")
    for entity_id, fields in sorted(items.items()):
        described = ", ".join(f"{k}={v}" for k, v in fields.items() if k != "__typename")
        say(f"    {name} holds {fields['__typename']} {entity_id[-6:]}: {described}")


def narrate(name: str) -> Any:
    def on_result(outcome: PushOutcome) -> None:
        entry = outcome.entry
        what = f"{entry.verb} of {entry.type_name} {entry.entity_id[-6:]}"
        if outcome.status == "APPLIED":
            say(
                f"    {name}: the server applied the {what}"
                + (" (a replay of an earlier try)" if outcome.replayed else "")
            )
        elif outcome.status == "CONFLICT":
            current = outcome.item or {}
            say(
                f"    {name}: CONFLICT on the {what}: someone changed it first; the server "
                f"sent its current version ({current.get('__typename')}), the device rebases "
                "its own changes onto it"
            )
        else:
            say(f"    {name}: the server rejected the {what}: {outcome.error}")

    return on_result


def main() -> int:
    tenant = "demo-family"
    with server() as (url, secret), tempfile.TemporaryDirectory() as tmp:
        token = make_local_token(secret, "demo", [tenant], 3600)
        phone = SyncClient(
            Path(tmp) / "phone.sqlite3",
            tenant,
            HttpTransport(url, token),
            on_push_result=narrate("phone"),
        )
        tablet = SyncClient(
            Path(tmp) / "tablet.sqlite3",
            tenant,
            HttpTransport(url, token),
            on_push_result=narrate("tablet"),
        )
        say("\n1. The phone adds Ann while offline, then syncs.")
        ann = phone.create("Person", {"givenName": "Ann", "familyName": "Lee"})
        say(f"    phone has {phone.pending()} edit waiting in its outbox")
        phone.sync()
        say("\n2. The tablet syncs and receives Ann.")
        report = tablet.sync()
        say(f"    tablet pulled {report.pulled} change(s) in {report.pages} page(s)")
        show("tablet", tablet)

        say(
            "\n3. Both go offline. The phone renames Ann and adds her job; the tablet "
            "renames her too and changes her family name."
        )
        phone.update(ann, {"givenName": "Anna", "occupation": "pilot"})
        tablet.update(ann, {"givenName": "Annie", "familyName": "Kim"})
        show("phone ", phone)
        show("tablet", tablet)

        say("\n4. The phone reconnects first.")
        phone.sync()
        say("\n5. The tablet reconnects: its edit was based on an old version.")
        tablet.sync()
        say(
            "    The server's givenName (Anna) stays: the phone changed it first. The "
            "tablet's familyName (Kim) did not clash, so it was pushed again and applied."
        )
        say("\n6. The phone syncs again and gets the tablet's change.")
        phone.sync()
        show("phone ", phone)
        show("tablet", tablet)

        say("\n7. Offline again: the phone deletes Ann while the tablet edits her.")
        phone.delete(ann)
        tablet.update(ann, {"phoneNumber": "+1 415 555 0100"})
        phone.sync()
        tablet.sync()
        say("    The deletion wins: the tablet's edit is dropped and Ann is gone there too.")
        phone.sync()
        show("phone ", phone)
        show("tablet", tablet)

        same = phone.items() == tablet.items() and not phone.pending() and not tablet.pending()
        say("\nBoth devices hold exactly the same data." if same else "\nTHE DEVICES DIFFER.")
        phone.close()
        tablet.close()
        return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
