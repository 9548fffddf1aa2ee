"""The device's SQLite file: server versions, the outbox, the sync position, and the
bytes of attachments (attached here and not uploaded yet, or kept as a cache).

Everything the client knows lives here, so a client rebuilt from the file after
a crash carries on where the last committed transaction left it.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sync_client.outbox import Entry

_SCHEMA = """
CREATE TABLE IF NOT EXISTS base (
    id TEXT PRIMARY KEY, type TEXT NOT NULL, token TEXT NOT NULL,
    deleted INTEGER NOT NULL, fields TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS outbox (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL, type TEXT NOT NULL,
    verb TEXT NOT NULL, changes TEXT NOT NULL, base_token TEXT, base_fields TEXT NOT NULL,
    cmid TEXT, sent INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS outbox_by_id ON outbox (id, seq);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS blobs (
    sha256 TEXT PRIMARY KEY, content_type TEXT NOT NULL, data BLOB NOT NULL,
    uploaded INTEGER NOT NULL, used REAL NOT NULL
);
"""


@dataclass(frozen=True)
class LocalBlob:
    """Bytes this device holds. `uploaded`: the server was last known to hold them as
    `content_type` (uploaded from here, answered alreadyPresent, or downloaded)."""

    sha256: str
    content_type: str
    data: bytes
    uploaded: bool


@dataclass(frozen=True)
class ServerVersion:
    """The latest version of an entity this device has seen from the server."""

    entity_id: str
    type_name: str  # Person, Reminder, ...; for a deleted entity, its type before
    token: str
    deleted: bool
    fields: dict[str, Any]


class LocalStore:
    def __init__(self, path: str | Path) -> None:
        self._db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(_SCHEMA)

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    # --- server versions ---------------------------------------------------

    def server_version(self, entity_id: str) -> ServerVersion | None:
        row = self._db.execute(
            "SELECT id, type, token, deleted, fields FROM base WHERE id = ?", (entity_id,)
        ).fetchone()
        return None if row is None else _version(row)

    def server_versions(self) -> list[ServerVersion]:
        rows = self._db.execute("SELECT id, type, token, deleted, fields FROM base ORDER BY id")
        return [_version(row) for row in rows]

    def remember(self, version: ServerVersion) -> None:
        """Keep a server version unless a newer one is already known. The same
        version again replaces it: a resync or an upgrade's catch-up brings the fields
        the app's earlier release did not select (docs/evolution.md)."""
        self._db.execute(
            "INSERT INTO base (id, type, token, deleted, fields) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT (id) DO UPDATE SET type = excluded.type, token = excluded.token, "
            "deleted = excluded.deleted, fields = excluded.fields "
            "WHERE excluded.token >= base.token",
            (
                version.entity_id,
                version.type_name,
                version.token,
                int(version.deleted),
                json.dumps(version.fields, sort_keys=True),
            ),
        )

    def forget(self, entity_id: str) -> None:
        """Drop the server version of an entity the server no longer has (a resync)."""
        self._db.execute("DELETE FROM base WHERE id = ?", (entity_id,))

    # --- outbox ------------------------------------------------------------

    def entries(self) -> list[Entry]:
        rows = self._db.execute(
            "SELECT seq, id, type, verb, changes, base_token, base_fields, cmid, sent "
            "FROM outbox ORDER BY seq"
        )
        return [_entry(row) for row in rows]

    def entries_for(self, entity_id: str) -> list[Entry]:
        rows = self._db.execute(
            "SELECT seq, id, type, verb, changes, base_token, base_fields, cmid, sent "
            "FROM outbox WHERE id = ? ORDER BY seq",
            (entity_id,),
        )
        return [_entry(row) for row in rows]

    def append(self, entry: Entry) -> None:
        self._db.execute(
            "INSERT INTO outbox (id, type, verb, changes, base_token, base_fields, cmid, sent) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            _entry_values(entry),
        )

    def save(self, entry: Entry) -> None:
        self._db.execute(
            "UPDATE outbox SET id = ?, type = ?, verb = ?, changes = ?, base_token = ?, "
            "base_fields = ?, cmid = ?, sent = ? WHERE seq = ?",
            (*_entry_values(entry), entry.seq),
        )

    def remove(self, seq: int) -> None:
        self._db.execute("DELETE FROM outbox WHERE seq = ?", (seq,))

    def clear(self) -> None:
        """Forget the tenant: server versions, outbox, position and blobs (it was deleted,
        or the device let go of it)."""
        for table in ("base", "outbox", "meta", "blobs"):
            self._db.execute(f"DELETE FROM {table}")  # noqa: S608 (fixed table names)

    def compact(self) -> None:
        """Rewrite the file without its free pages (what `clear` deleted stays in them
        otherwise) and empty the write-ahead log. Outside a transaction."""
        self._db.execute("VACUUM")
        self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    # --- attachment bytes ---------------------------------------------------

    def blob(self, sha256: str) -> LocalBlob | None:
        row = self._db.execute(
            "SELECT sha256, content_type, data, uploaded FROM blobs WHERE sha256 = ?", (sha256,)
        ).fetchone()
        return None if row is None else LocalBlob(row[0], row[1], bytes(row[2]), bool(row[3]))

    def keep_blob(self, sha256: str, content_type: str, data: bytes, uploaded: bool) -> None:
        """Hold these bytes (already held: only marked as used now, and as uploaded
        when `uploaded`)."""
        self._db.execute(
            "INSERT INTO blobs (sha256, content_type, data, uploaded, used) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT (sha256) DO UPDATE SET used = excluded.used, "
            "content_type = CASE WHEN excluded.uploaded THEN excluded.content_type "
            "ELSE blobs.content_type END, "
            "uploaded = MAX(blobs.uploaded, excluded.uploaded)",
            (sha256, content_type, data, int(uploaded), time.time()),
        )

    def touch_blob(self, sha256: str) -> None:
        self._db.execute("UPDATE blobs SET used = ? WHERE sha256 = ?", (time.time(), sha256))

    def mark_uploaded(self, sha256: str, content_type: str, uploaded: bool = True) -> None:
        self._db.execute(
            "UPDATE blobs SET content_type = ?, uploaded = ? WHERE sha256 = ?",
            (content_type, int(uploaded), sha256),
        )

    def drop_blobs(self, sha256s: set[str]) -> None:
        """Drop these bytes (a record that left the member's view held them)."""
        self._db.executemany("DELETE FROM blobs WHERE sha256 = ?", [(s,) for s in sha256s])

    def trim_blobs(self, keep: set[str], budget_bytes: int) -> int:
        """Drop uploaded blobs not in `keep`, least recently used first, until the
        uploaded ones not in `keep` weigh at most `budget_bytes`; how many went.
        Bytes not uploaded yet are never dropped."""
        rows = self._db.execute(
            "SELECT sha256, length(data) FROM blobs WHERE uploaded = 1 ORDER BY used DESC"
        ).fetchall()
        total, dropped = 0, 0
        for sha256, size in rows:
            if sha256 in keep:
                continue
            total += size
            if total > budget_bytes:
                self._db.execute("DELETE FROM blobs WHERE sha256 = ?", (sha256,))
                dropped += 1
        return dropped

    # --- sync position -----------------------------------------------------

    def meta(self, key: str) -> str | None:
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, key: str, value: str | None) -> None:
        if value is None:
            self._db.execute("DELETE FROM meta WHERE key = ?", (key,))
        else:
            self._db.execute(
                "INSERT INTO meta (key, value) VALUES (?, ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (key, value),
            )

    def since(self) -> str | None:
        row = self._db.execute("SELECT value FROM meta WHERE key = 'since'").fetchone()
        return None if row is None else str(row[0])

    def set_since(self, token: str) -> None:
        self._db.execute(
            "INSERT INTO meta (key, value) VALUES ('since', ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (token,),
        )


def _version(row: tuple[Any, ...]) -> ServerVersion:
    return ServerVersion(row[0], row[1], row[2], bool(row[3]), json.loads(row[4]))


def _entry(row: tuple[Any, ...]) -> Entry:
    return Entry(
        seq=row[0],
        entity_id=row[1],
        type_name=row[2],
        verb=row[3],
        changes=json.loads(row[4]),
        base_token=row[5],
        base_fields=json.loads(row[6]),
        client_mutation_id=row[7],
        sent=bool(row[8]),
    )


def _entry_values(entry: Entry) -> tuple[Any, ...]:
    return (
        entry.entity_id,
        entry.type_name,
        entry.verb,
        json.dumps(entry.changes),
        entry.base_token,
        json.dumps(entry.base_fields),
        entry.client_mutation_id,
        int(entry.sent),
    )
