"""The S3 keys of the key design (`api.storage.keys`, which re-exports them): a
tenant's blobs and exports, and its prefixes."""

from __future__ import annotations

# Blobs (attachments, contract 3.10) are S3 objects, not items: one per tenant,
# generation and content, `tenants/<tenant>/<generation>/blobs/<sha256>`. The
# generation (32 hex digits) is the usage item's `gen`, new each time the tenant is
# deleted after it reserved an upload: an upload presigned before a deletion lands
# under a generation the tenant written again never reads (docs/attachments.md).
# A tenant that was never so deleted has the generation "" and the key
# `tenants/<tenant>/blobs/<sha256>` (as before generations). A tenant id holds no
# '/' (1-64 of [A-Za-z0-9_.:-], `api.domain.identifiers`), a generation is hex and
# a sha256 64 lowercase hex, so no key of one tenant (or generation) is under
# another's prefix, and IAM grants `tenants/*` only.
BLOB_KEY_PREFIX = "tenants/"


def blob_key(tenant_id: str, sha256: str, generation: str = "") -> str:
    if generation:
        return f"{BLOB_KEY_PREFIX}{tenant_id}/{generation}/blobs/{sha256}"
    return f"{BLOB_KEY_PREFIX}{tenant_id}/blobs/{sha256}"


def blob_prefix(tenant_id: str, generation: str = "") -> str:
    """The prefix of the tenant's blobs of one generation: a key under it is the
    prefix and a sha256."""
    return blob_key(tenant_id, "", generation)


def tenant_blobs_prefix(tenant_id: str) -> str:
    """Every blob of the tenant, under any sub-prefix of its own."""
    return f"{BLOB_KEY_PREFIX}{tenant_id}/"


# A finished export's file (contract 3.9) is one S3 object, published from the
# file's parts in the table: `exports/<tenant>/<export>.jsonl.gz`. Apart from the
# blobs, so that the bucket's lifecycle expires exports after 7 days (a rule on
# this prefix) and IAM can grant each its own actions; an export id is a ULID.
EXPORT_KEY_PREFIX = "exports/"


def export_key(tenant_id: str, export_id: str) -> str:
    return f"{EXPORT_KEY_PREFIX}{tenant_id}/{export_id}.jsonl.gz"


def tenant_prefixes(tenant_id: str) -> tuple[str, ...]:
    """Every S3 prefix of the tenant: what deleting the tenant empties (every version,
    delete marker and incomplete multipart upload under each)."""
    return (tenant_blobs_prefix(tenant_id), f"{EXPORT_KEY_PREFIX}{tenant_id}/")
