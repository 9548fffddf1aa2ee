"""Recorded releases are append-only: the record in the working tree against every
version of it committed before (`git log`), so that regenerating releases/ cannot
make a break pass (scripts/evolution_check.py; docs/evolution.md).

CI checks out a clone of the branch, whose history holds every commit that touched
releases/, the merge base's included. A recorded file is followed across its move
into the folder (a rename in a commit of the folder's history): the family app's
releases were recorded in the repository's root releases/ before they moved into
examples/family/, and a version committed there binds as much as one committed in
the app's folder. A shallow clone holds only its last commits: the check says so
and compares with what it has.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from scripts.evolution_report import Report
from scripts.release_record import Record, flatten


def _git(repo: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, text=True, check=False
        )
    except FileNotFoundError:
        return None
    return done.stdout if done.returncode == 0 else None


def committed_versions(repo: Path, folder: str) -> dict[tuple[str, str], str]:
    """{(path under `folder`, blob id): the oldest commit holding it} over HEAD's
    history, a file's versions under the path it had before it moved into `folder`
    too (one move: the family app's)."""
    log = _git(repo, "log", "--format=%H", "HEAD", "--", folder) or ""
    versions: dict[tuple[str, str], str] = {}
    for commit in log.split():  # newest first: the last one seen is the oldest
        listing = _git(repo, "ls-tree", "-r", commit, "--", f"{folder}/") or ""
        for line in listing.splitlines():
            meta, _, path = line.partition("\t")
            versions[(path, meta.split()[2])] = commit
    for commit in log.split():
        for old, new in _renames(repo, commit, folder):
            for earlier in (_git(repo, "log", "--format=%H", commit, "--", old) or "").split():
                blob = (_git(repo, "rev-parse", f"{earlier}:{old}") or "").strip()
                if blob:  # oldest last: the last one seen wins
                    versions[(new, blob)] = earlier
    return versions


def _renames(repo: Path, commit: str, folder: str) -> list[tuple[str, str]]:
    """(old path, new path under `folder`) of each file `commit` moved into `folder`
    (renames only: a copy, as of schema.graphql into a new release, is a new file)."""
    diff = (
        _git(repo, "diff-tree", "-r", "-M", "--diff-filter=R", "--name-status", "--root", commit)
        or ""
    )
    moved: list[tuple[str, str]] = []
    for line in diff.splitlines()[1:]:
        parts = line.split("\t")
        if len(parts) == 3 and parts[2].startswith(f"{folder}/"):
            moved.append((parts[1], parts[2]))
    return moved


def check_history(report: Report, record: Record, repo: Path) -> None:
    if _git(repo, "rev-parse", "--is-inside-work-tree") is None:
        report.notes.append("not a git checkout: the record's history was not checked")
        return
    if (_git(repo, "rev-parse", "--is-shallow-repository") or "").strip() == "true":
        report.notes.append(
            "a shallow clone: the record was compared with the commits it holds only "
            "(git fetch --unshallow checks every one)"
        )
    folder = record.folder.resolve().relative_to(repo.resolve()).as_posix()
    for (path, blob), commit in sorted(committed_versions(repo, folder).items()):
        name = Path(path).name
        number = int(Path(path).stem) if Path(path).stem.isdigit() else 0
        committed = _git(repo, "cat-file", "blob", blob) or ""
        current = record.folder / name
        where = f"{path}, as committed in {commit[:10]}"
        if not current.is_file():
            report.add("rewritten", f"{where}, was removed", number)
        elif name.endswith(".json"):
            _compare_entries(report, number, where, committed, current.read_text())
        elif name.endswith(".graphql") and committed.strip() != current.read_text().strip():
            report.add("rewritten", f"{where}, was rewritten", number)


def _compare_entries(report: Report, number: int, where: str, old: str, new: str) -> None:
    try:
        before, after = flatten(json.loads(old)), flatten(json.loads(new))
    except (ValueError, KeyError, TypeError) as exc:
        report.add("rewritten", f"{where}: cannot be compared ({exc!r})", number)
        return
    for key in sorted(set(before) | set(after)):
        if key not in after:
            report.add("rewritten", f"{where}: {key} was removed from the record", number)
        elif key not in before:
            report.add("rewritten", f"{where}: {key} was added to the record", number)
        elif before[key] != after[key]:
            changed = ", ".join(
                f"{name} {before[key].get(name)} -> {after[key].get(name)}"
                for name in sorted(set(before[key]) | set(after[key]))
                if before[key].get(name) != after[key].get(name)
            )
            report.add("rewritten", f"{where}: {key} was changed ({changed})", number)
