"""clients/rxdb with its pinned dev dependencies (package-lock.json), installed with
`npm ci` into .cache/rxdb-tests (tests/support/node_packages.py), its sources beside
them, and the Node.js 22 that runs them."""

from __future__ import annotations

import filecmp
import shutil
from pathlib import Path

from filelock import FileLock

from api.settings import DEFAULT_CATALOG_FILE, PROJECT_ROOT
from tests.support import node_packages
from tests.support.node_packages import NODE_22 as NODE
from tests.support.node_packages import NPM_22 as NPM
from tests.support.node_packages import node_22_env as node_env

MODULE = PROJECT_ROOT / "clients" / "rxdb"
DEPS = node_packages.RXDB.target
# The default app's generated collection schemas (scripts/generate-clients).
GENERATED = DEFAULT_CATALOG_FILE.parent / "clients" / "rxdb" / "schemas.json"
# The tests' app's (tests/apps/release2/), for each of its releases: the scenario
# suite's collections (test/scenarios.mjs imports generated/release2/N/rxdb/).
RELEASE2_CLIENTS = PROJECT_ROOT / "tests" / "apps" / "release2" / "clients"
# The module's sources and tests, copied next to the installed packages.
SOURCES = ("index.js", "example.mjs", "test", "examples")

__all__ = ["DEPS", "NODE", "NPM", "install", "node_env"]


def install() -> Path:
    """DEPS with clients/rxdb's lock file installed (again when it changed) and the
    module's current sources; its path. Two test files use it, maybe at once in two
    workers (scripts/test runs files in parallel): one installs while the other waits."""
    with FileLock(f"{DEPS}.lock", timeout=900):
        return _install()


def _install() -> Path:
    node_packages.install(node_packages.RXDB)
    for name in SOURCES:
        source = MODULE / name
        if source.is_dir():
            shutil.copytree(
                source,
                DEPS / name,
                dirs_exist_ok=True,
                ignore=shutil.ignore_patterns("node_modules", "build"),
                copy_function=_copy_changed,
            )
        else:
            _copy_changed(source, DEPS / name)
    # example.mjs's collection schemas: what `scripts/generate-clients --out generated`
    # writes for the default app (the family example's, committed).
    (DEPS / "generated" / "rxdb").mkdir(parents=True, exist_ok=True)
    _copy_changed(GENERATED, DEPS / "generated" / "rxdb" / "schemas.json")
    for release in sorted(p for p in RELEASE2_CLIENTS.iterdir() if p.is_dir()):
        target = DEPS / "generated" / "release2" / release.name / "rxdb"
        target.mkdir(parents=True, exist_ok=True)
        _copy_changed(release / "rxdb" / "schemas.json", target / "schemas.json")
    return DEPS


def _copy_changed(source: str | Path, target: str | Path) -> None:
    """A source copied only when it changed: node in the other worker may be reading
    the copy this moment, and rewriting it whole would show it a truncated file."""
    if not Path(target).exists() or not filecmp.cmp(source, target, shallow=False):
        shutil.copy2(source, target)
