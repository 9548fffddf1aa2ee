"""Release 2 of an app built on this API, as an app team would make it:
tests/apps/release2/catalog.yaml (the family example's release 1, plus a field, an
enum value, a type and the API's own types in release 2), read as a server reads it.

A server serves it with SERVER_ENV (its latest release) or with SYNC_RELEASE=1 beside
it (the same code, release 1's catalog: a rollback). Its clients of each release are
generated in tests/apps/release2/clients/N (scripts/generate-clients).
"""

from __future__ import annotations

from pathlib import Path

from api.domain import catalog, releases
from api.domain.catalog_file import load
from api.domain.item_types import ItemType

APP_DIR = Path(__file__).resolve().parents[1] / "apps" / "release2"
CATALOG_FILE = APP_DIR / "catalog.yaml"
DECLARED: tuple[ItemType, ...] = catalog.declared_by(load(CATALOG_FILE, reserved=catalog.BUILTIN))
_BY_NAME = {t.name: t for t in DECLARED}
PERSON = _BY_NAME["Person"]
REMINDER = _BY_NAME["Reminder"]
NOTE = _BY_NAME["Note"]
RELEASE_1 = releases.at(DECLARED, 1)
RELEASE_2 = releases.at(DECLARED, 2)
# A server's environment serving this catalog (its latest release, 2).
SERVER_ENV = {"SYNC_CATALOG_FILE": str(CATALOG_FILE)}


def clients(release: int) -> Path:
    """The folder of the clients generated for `release` (rxdb/, watermelondb/, python/)."""
    return APP_DIR / "clients" / str(release)
