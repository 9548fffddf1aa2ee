"""A declaration whose fields at their bounds add up to more than a record holds
(api/domain/item_bounds.py): named when the catalog loads, with the most its record
takes, and served (a write of such values is refused, `item is too large`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from api.domain import catalog
from api.domain.catalog_file import load
from api.domain.errors import BadUserInput
from api.domain.item_bounds import most_bytes
from api.domain.item_types import MAX_ITEM_BYTES, Field, FieldKind, check_size
from tests.support import kinds

_WIDE = "\U0001f600"  # 4 bytes in UTF-8, the most a code point takes


def _at_bounds(spec: Field) -> Any:
    """A value of `spec` as large as its declaration lets it be."""
    if spec.kind is FieldKind.LIST:
        return [_at_bounds(spec.item)] * spec.max_items
    if spec.kind is FieldKind.OBJECT:
        return {s.name: _at_bounds(s) for s in spec.fields}
    if spec.kind in (FieldKind.STRING, FieldKind.ID):
        return _WIDE * spec.max_length
    if spec.kind is FieldKind.ENUM:
        assert spec.enum is not None
        return max(spec.enum.__members__, key=len)
    if spec.kind is FieldKind.INT:
        return int(spec.minimum if spec.minimum is not None else -(2**31))
    if spec.kind is FieldKind.FLOAT:
        return float(spec.minimum) if spec.minimum is not None else -1.7976931348623157e308
    return {
        FieldKind.BOOLEAN: False,
        FieldKind.DATE: "2026-11-28",
        FieldKind.TIME: "2026-11-28T22:10:00.000Z",
        FieldKind.COLOR: "#112233",
        FieldKind.REF: "p" * 256,
        FieldKind.ATTACHMENT: {
            "sha256": "a" * 64,
            "size": 10**7,
            "contentType": "image/" + "a" * 63,
        },
    }[spec.kind]


def _counted(fields: dict[str, Any]) -> int:
    """What check_size counts for `fields` (its message says it when it refuses)."""
    try:
        check_size(fields | {"pad": "x" * MAX_ITEM_BYTES})
    except BadUserInput as refused:
        return int(str(refused).split(": ")[1].split()[0]) - len("pad") - MAX_ITEM_BYTES
    raise AssertionError("a record past the bound passed")


def test_a_type_whose_bounds_pass_a_records_is_named_when_its_catalog_loads(
    tmp_path: Path,
) -> None:
    path = tmp_path / "catalog.yaml"
    path.write_text(
        "types:\n  Note:\n    code: NOTE\n    fields:\n"
        "      body: {kind: String, maxLength: 5000}\n"
        "      tags: {kind: List, of: String, maxLength: 20, maxItems: 10}\n"
        "  Small:\n    code: SMALL\n    fields:\n      a: {kind: String, maxLength: 100}\n"
    )
    app = load(path, reserved=catalog.BUILTIN)
    (warning,) = app.warnings
    note = app.types[0]
    body = _WIDE * 5000
    tags = [_WIDE * 20] * 10
    # Exact for strings and lists of them: each character at its widest.
    assert most_bytes(note) == _counted({"body": body, "tags": tags}) == 20_839
    assert warning.startswith(f"{path}: Note: its fields at their bounds take up to 20839 bytes")
    assert f"more than a record's {MAX_ITEM_BYTES}" in warning
    # Served: values within each field's bounds that add up to more are refused.
    fields = note.normalize_changes({"body": body, "tags": tags})
    with pytest.raises(BadUserInput, match="item is too large"):
        check_size(fields)


@pytest.mark.parametrize("item_type", kinds.ALL, ids=lambda t: t.name)
def test_the_most_a_type_takes_is_at_least_what_a_record_at_its_bounds_takes(
    item_type: Any,
) -> None:
    record = {f.name: _at_bounds(f) for f in item_type.fields}
    normalized = item_type.normalize_changes(record)
    assert _counted(normalized) <= most_bytes(item_type)


def test_the_shipped_apps_types_past_the_bound_are_the_ones_warned_of() -> None:
    """The task tracker's Task (lists of up to 100 ids and numbers) passes 16 KB at its
    bounds, its Project does not; the warning names Task alone."""
    assert most_bytes(kinds.TASK) > MAX_ITEM_BYTES >= most_bytes(kinds.PROJECT)
    assert [w.split(": ")[1] for w in kinds.APP.warnings] == ["Task"]
