"""The Lambda ships exact versions with hashes (requirements-lambda.txt), the ones
pyproject's `dependencies` ask for; scripts/package-lambda installs only those."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "requirements-lambda.txt"


def _locked() -> dict[str, tuple[str, list[str]]]:
    """name -> (version, hashes) of every requirement in the lock file."""
    text = LOCK.read_text()
    entries: dict[str, tuple[str, list[str]]] = {}
    for block in re.split(r"\n(?=[A-Za-z0-9])", text):
        head = block.split(" ", 1)[0].strip()
        if not head or head.startswith("#"):
            continue
        name, _, version = head.partition("==")
        assert version, f"not pinned with ==: {head!r}"
        entries[canonicalize_name(name)] = (
            version,
            re.findall(r"--hash=sha256:([0-9a-f]{64})", block),
        )
    return entries


def test_every_locked_package_is_pinned_with_its_hashes() -> None:
    locked = _locked()
    assert len(locked) > 10
    for name, (version, hashes) in locked.items():
        assert re.fullmatch(r"[0-9][0-9A-Za-z.+!-]*", version), (name, version)
        assert hashes, f"{name}=={version} has no --hash"


def test_the_lock_holds_what_pyproject_asks_for() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    locked = _locked()
    for line in project["dependencies"]:
        wanted = Requirement(line)
        name = canonicalize_name(wanted.name)
        assert name in locked, f"{wanted.name} is missing: run scripts/lock-lambda"
        version = locked[name][0]
        assert wanted.specifier.contains(version, prereleases=True), (
            f"{wanted.name}=={version} does not satisfy {line!r}: run scripts/lock-lambda"
        )
    # Nothing of the server's or the developers' extras is shipped.
    assert "uvicorn" not in locked and "pytest" not in locked and "moto" not in locked


def test_the_build_installs_the_lock_alone_with_hashes_required() -> None:
    script = (ROOT / "scripts" / "package-lambda").read_text()
    install = script[
        script.index("pip install") : script.index('--requirement "$CODE/requirements-lambda.txt"')
    ]
    for flag in ("--require-hashes", "--no-deps", "--only-binary=:all:", "--no-compile"):
        assert flag in install, flag
