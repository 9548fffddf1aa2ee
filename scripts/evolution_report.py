"""What the catalog's evolution check found (scripts/evolution_check.py): the
problems that fail it, each under what to do instead, and the notes it prints.
Shared by the check's parts (scripts/record_history.py among them) and
scripts/record-release."""

from __future__ import annotations

from dataclasses import dataclass, field

# What to do instead, by what broke: each refusal prints its line (docs/evolution.md).
ADVICE = {
    "removed": (
        "Deprecate instead of removing or renaming: keep it in the catalog (a client or a "
        "server of an earlier release still reads, sends and stores it), mark a field "
        '@deprecated (`deprecated: "Use X."` on the field), stop writing it from the app, '
        "and add the new one with `since: {next}`."
    ),
    "code": (
        "A type's code is stored in every item of the type and is its DeletedItemType "
        "value: keep each type's code for ever, and give a new type a code never recorded."
    ),
    "kind": (
        "Keep the field's kind: deprecate the field (`deprecated: why`, then stop "
        "writing it) and add a new field of the new kind with `since: {next}`."
    ),
    "narrowed": (
        "Keep the constraint (stored values and clients of an earlier release hold what "
        "it allowed): check the narrower rule in the app, or deprecate the field and add "
        "a new one with the narrower constraint and `since: {next}`. A wider one (a higher "
        "maxLength) is allowed."
    ),
    "required": (
        "Add it as optional (nullable, or with a default) and treat its absence as an "
        "earlier release's client meant it."
    ),
    "moved": (
        "A recorded release keeps its entries: declare it with the since it was recorded "
        "with; what is new gets `since: {next}`."
    ),
    "unrecorded": (
        "Declare what is new with `since: {next}` (nothing may join a release that "
        "shipped), then run scripts/export-schema and scripts/record-release and commit "
        "the app's releases/."
    ),
    "rewritten": (
        "Recorded releases are append-only: restore the record as committed "
        "(git checkout <commit> -- <the app's folder>/releases/) and make the change in the "
        "catalog, as a "
        "new release."
    ),
    "schema": (
        "Deprecate instead: keep the element in the schema, mark it @deprecated, and add "
        "what replaces it."
    ),
}


@dataclass
class Report:
    """What the check found: problems fail it, notes are printed."""

    problems: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    next_release: int = 1

    def add(self, category: str, what: str, release: int = 0) -> None:
        """One problem; the same one found against several releases is listed once."""
        releases_of = self.problems.setdefault((category, what), [])
        if release and release not in releases_of:
            releases_of.append(release)

    @property
    def ok(self) -> bool:
        return not self.problems

    def text(self) -> str:
        lines = [f"note: {note}" for note in self.notes]
        for category in ADVICE:
            found = [(w, r) for (c, w), r in self.problems.items() if c == category]
            if not found:
                continue
            for what, at in found:
                where = f" (against release{'s' if len(at) > 1 else ''} " if at else ""
                lines.append(f"- {what}{where}{', '.join(map(str, at))})" if at else f"- {what}")
            lines.append("  " + ADVICE[category].format(next=self.next_release))
        return "\n".join(lines)
