"""What a push's entries refer to, resolved before they are decided: the blobs its
writes newly reference, checked once before any transaction (contract 3.10), and the
type of each record a setVisibility names by id alone (contract 3.12)."""

from __future__ import annotations

from dataclasses import replace

from api.domain.attachments import Blob, referenced_blob
from api.domain.errors import AttachmentMissing, SyncError
from api.domain.identifiers import check_entity_id, check_identifier
from api.domain.mutations import Mutation
from api.service.attachments import Attachments, references
from api.service.deciding import Entry, Known, answer
from api.service.ports import PushResult, Store


def typed(store: Store, tenant_id: str, mutations: list[Mutation]) -> list[Mutation]:
    """`mutations` with each setVisibility's type, the stored entity's (one
    BatchGetItem when any names a record by id alone); one of a record that does not
    exist keeps its placeholder, and is NOT_FOUND like any other."""
    ids = [m.entity_id for m in mutations if m.untyped and m.entity_id is not None]
    if not ids:
        return mutations
    try:
        check_identifier(tenant_id, "tenantID")
        for entity_id in ids:
            check_entity_id(entity_id, "id")
    except SyncError:
        return mutations  # refused as they are, when validated
    records, _ = store.read_many(tenant_id, ids, [])
    found = {i: r.item_type for i, r in records.items()}
    return [
        replace(m, item_type=found[m.entity_id], untyped=False)
        if m.untyped and m.entity_id in found
        else m
        for m in mutations
    ]


def with_attachments(
    attachments: Attachments | None,
    todo: list[Entry],
    known: Known,
    results: dict[int, PushResult],
) -> list[Entry]:
    """The entries whose new references name blobs the tenant holds; each other one
    is answered alone (ATTACHMENT_MISSING, or UNAVAILABLE when the blob store did
    not answer). Asked after the push's one read and before any transaction: a
    reference the entity already holds was checked when written, and a retry with
    a stored outcome is a replay, so neither costs a HeadObject. `attachments`:
    None when there is no blob store, and a write that references one is refused."""
    wanted = {e.position: _new_references(e, known) for e in todo}
    if not any(wanted.values()):
        return todo
    blobs = [b for refs in wanted.values() for b in refs]
    if attachments is None:
        refused: dict[Blob, SyncError] = {
            b: AttachmentMissing("attachments are not served here") for b in blobs
        }
    else:
        by = next((e.by for e in todo if wanted[e.position]), None)  # one caller a push
        refused = attachments.missing(blobs, by)
    kept: list[Entry] = []
    for entry in todo:
        error = next((refused[b] for b in wanted[entry.position] if b in refused), None)
        if error is None:
            kept.append(entry)
        else:
            results[entry.position] = answer(entry.mutation, error)
    return kept


def _new_references(entry: Entry, known: Known) -> list[Blob]:
    cmid = entry.client_mutation_id
    if cmid is not None and cmid in known.outcomes:
        return []  # answered by its stored outcome, whatever it references
    current = known.records.get(entry.mutation.entity_id or "")
    held = {} if current is None or current.deleted else current.fields
    return [
        b
        for name, b in references(entry.mutation)
        if name not in held or referenced_blob(b.tenant_id, held[name]) != b
    ]
