"""The blob usage item's flag of restricted records, for a tenant whose item lacks it.

The flag is set on the usage item in the transaction that first sets the head's
(`api.storage.stream_writes`), so attachments learn it from the item they read anyway.
A tenant that restricted a record before that (a build of release N beside N+1's) has
the head's flag and not the item's: an item without the flag is answered from the
head (`reads.head`), once, and the answer kept on the item (true or false), so a tenant pays the
head's read once, not at each call (docs/attachments.md, "Who may download")."""

from __future__ import annotations

from botocore.exceptions import ClientError

from api.domain.errors import Unavailable
from api.storage import reads
from api.storage.errors import error_code, translated
from api.storage.models import BlobUsageItem
from api.storage.reads import TOTAL_CAPACITY, connection

_FLAG = BlobUsageItem.restricted.attr_name


def from_head(table: str, tenant_id: str, usage_key: dict[str, object], deleting: str) -> bool:
    """Whether the tenant has (had) a restricted record, by its head (one consistent
    GetItem), kept on its usage item unless the item got a flag meanwhile (the first
    restricted write's transaction, which sets it true whatever this writes: a `false`
    written first is overwritten, one written after is refused by the condition) or
    is being deleted (`deleting`: the deletion's mark; it removes the flag)."""
    head = reads.head(tenant_id)  # TenantDeleted while it is being deleted
    restricted = head is not None and head.restricted
    client = connection().client
    try:
        with translated():
            client.update_item(
                TableName=table,
                Key=usage_key,
                UpdateExpression="SET #f = :f",
                ConditionExpression="attribute_not_exists(#f) AND attribute_not_exists(#x)",
                ExpressionAttributeNames={"#f": _FLAG, "#x": deleting},
                ExpressionAttributeValues={":f": {"BOOL": restricted}},
                ReturnConsumedCapacity=TOTAL_CAPACITY,
            )
    except Unavailable:
        pass  # the answer stands; the next call keeps it
    except ClientError as exc:  # translated() re-raises what it does not translate
        if error_code(exc) != "ConditionalCheckFailedException":
            raise
    return restricted
