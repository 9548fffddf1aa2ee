"""Prometheus text read with prometheus-client's own parser."""

from __future__ import annotations

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families


def samples_of_file(path: Path) -> dict[str, float]:
    """Each sample's name and value (series without labels), but a counter's
    `_created` (prometheus-client's, when the process made it)."""
    return {
        s.name: s.value
        for family in text_string_to_metric_families(path.read_text())
        for s in family.samples
        if not s.name.endswith("_created")
    }
