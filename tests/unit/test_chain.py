"""The read rule of the change chain (api.domain.chain), case by case.

Tokens here are short strings that sort like change tokens; `entries` maps each
log entry a read returned to its `prev` link.
"""

from __future__ import annotations

from api.domain.chain import Head, TailProof, prove_tail
from api.domain.tokens import tokens_from


def test_a_visible_head_entry_linked_down_to_since_proves_everything() -> None:
    entries = {"t5": "t4", "t4": "t3", "t3": "t2"}
    assert prove_tail("t5", "t4", entries, "t2") == TailProof("t5", ["t3", "t4", "t5"], True)


def test_without_the_head_entry_the_bound_falls_back_to_prev() -> None:
    # The head's own entry is not applied yet (or was already replaced).
    entries = {"t4": "t3", "t3": "t2"}
    assert prove_tail("t5", "t4", entries, "t2") == TailProof("t4", ["t3", "t4"], True)


def test_a_missing_link_ends_what_the_read_proves() -> None:
    # t4 is missing: replaced by a newer version, or not visible to this read in
    # whatever order it read the items. Only t5 is proven; below it is read again.
    entries = {"t5": "t4", "t3": "t2"}
    assert prove_tail("t5", "t4", entries, "t2") == TailProof("t5", ["t5"], False)


def test_a_read_cut_by_its_limit_is_incomplete() -> None:
    entries = {"t9": "t8", "t8": "t7"}
    assert prove_tail("t9", "t8", entries, None) == TailProof("t9", ["t8", "t9"], False)


def test_since_at_the_head_is_up_to_date_not_too_new() -> None:
    # A Query for sk > since cannot return the entry at since itself.
    proof = prove_tail("t5", "t4", {}, "t5")
    assert proof.linked == [] and proof.complete and proof.bound is not None
    assert proof.bound <= "t5"


def test_a_tenants_first_write() -> None:
    assert prove_tail("t1", None, {"t1": None}, None) == TailProof("t1", ["t1"], True)
    # Head applied, entry not yet: nothing is proven.
    assert prove_tail("t1", None, {}, None) == TailProof(None, [], True)
    # Entry applied, head not yet: the read met no head; nothing is proven.
    assert prove_tail(None, None, {"t1": None}, None) == TailProof(None, [], True)


def test_an_entry_above_the_head_is_left_to_the_next_sync() -> None:
    # t6's transaction applied its entry before its head.
    entries = {"t6": "t5", "t5": "t4", "t4": "t3"}
    assert prove_tail("t5", "t4", entries, "t3") == TailProof("t5", ["t4", "t5"], True)


def test_a_link_below_since_still_covers_everything_above_it() -> None:
    assert prove_tail("t5", "t3", {"t5": "t3"}, "t4") == TailProof("t5", ["t5"], True)


# --- transactions of several entries (group commit) ------------------------------
# A transaction wrote t3, t4, t5 (consecutive tokens, in push order) after the head
# t2: its entries link t5 -> t4 -> t3 -> t2, and the head holds t5 with prev t2.


def test_a_group_seen_whole_is_proven() -> None:
    entries = {"t5": "t4", "t4": "t3", "t3": "t2", "t2": "t1"}
    assert prove_tail("t5", "t2", entries, "t1") == TailProof("t5", ["t2", "t3", "t4", "t5"], True)


def test_a_group_seen_in_part_bounds_the_sync_below_it() -> None:
    # t4 not applied yet (DynamoDB applies a transaction's items one by one): t5
    # alone proves nothing about t4, so the bound is the head before the group.
    entries = {"t5": "t4", "t3": "t2", "t2": "t1"}
    assert prove_tail("t5", "t2", entries, "t1") == TailProof("t2", ["t2"], True)


def test_a_group_above_since_needs_only_its_entries_above_since() -> None:
    # The device's token is t3, inside the group (a page ended there).
    assert prove_tail("t5", "t2", {"t5": "t4", "t4": "t3"}, "t3") == TailProof(
        "t5", ["t4", "t5"], True
    )


def test_a_group_cut_by_the_reads_limit_is_not_proven() -> None:
    # The read returned only the newest two of the group: the bound stays below.
    assert prove_tail("t5", "t2", {"t5": "t4", "t4": "t3"}, None).bound == "t2"


def test_head_entry_tokens_are_the_groups_consecutive_tokens() -> None:
    first = "01JAAAAAAAAAAAAAAAAAAAAAAY"
    group = tokens_from(first, 3)
    assert group == sorted(group) and group[0] == first
    assert Head(group[-1], 3).entry_tokens() == group
    assert Head(group[-1]).entry_tokens() == [group[-1]]
