"""Reads: a bulk page of 100, a poll with no changes, an incremental sync of 10;
each against the raw Query, the floor route and the library's floor (`floor.py`)."""

from __future__ import annotations

import math

from api.domain.records import Record
from scripts.benchmarks import raw
from scripts.benchmarks.harness import CHANGES, TABLE, Harness


def measure_reads(h: Harness, page: list[Record], item_bytes: list[int]) -> None:
    ddb = h.ddb
    page_bytes = sum(item_bytes)

    # 1. A bulk page of 100 people.
    h.same_as_library({"t": "page", "l": 100})
    h.row(
        "changes: page of 100 Person",
        lambda c, i: h.post(h.clients[c], CHANGES, {"t": "page", "l": 100}),
        lambda c, i: raw.query_page(ddb, TABLE, "page", 100),
        h.read_units(
            math.ceil(page_bytes / 4096),
            CHANGES,
            {"t": "page", "l": 100},
            lambda: raw.query_page(ddb, TABLE, "page", 100),
        ),
        floor=lambda c, i: h.floor(c, "page", {"tenant": "page", "limit": 100}),
        library=lambda c, i: h.library(c, {"t": "page", "l": 100}),
    )

    # 2. A poll with no changes.
    head = page[-1].change_token
    h.same_as_library({"t": "page", "s": head})
    h.row(
        "changes: poll, no changes",
        lambda c, i: h.post(h.clients[c], CHANGES, {"t": "page", "s": head}),
        lambda c, i: raw.query_tail(ddb, TABLE, "page", head),
        h.read_units(
            1, CHANGES, {"t": "page", "s": head}, lambda: raw.query_tail(ddb, TABLE, "page", head)
        ),
        floor=lambda c, i: h.floor(c, "tail", {"tenant": "page", "after": head}),
        library=lambda c, i: h.library(c, {"t": "page", "s": head}),
    )

    # 3. An incremental sync of 10 changes.
    since = h.touch("page", 10)
    h.same_as_library({"t": "page", "s": since})
    h.row(
        "changes: incremental, 10 changes",
        lambda c, i: h.post(h.clients[c], CHANGES, {"t": "page", "s": since}),
        lambda c, i: raw.query_tail(ddb, TABLE, "page", since),
        h.read_units(
            math.ceil(sum(item_bytes[:10]) / 4096),
            CHANGES,
            {"t": "page", "s": since},
            lambda: raw.query_tail(ddb, TABLE, "page", since),
        ),
        floor=lambda c, i: h.floor(c, "tail", {"tenant": "page", "after": since}),
        library=lambda c, i: h.library(c, {"t": "page", "s": since}),
    )
