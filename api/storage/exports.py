"""Export jobs and the parts of their files, in the tenant's export partition
(`api.storage.keys`): a job item, and its file's parts `<export>#<n>`, each a gzip
member (their concatenation is one gzip file). A step's parts and the job's new
state are written by one transaction, conditioned on the parts the job had: two
calls racing on one job cannot both advance it, and a step that dies writes
nothing."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from botocore.exceptions import ClientError

from api.domain.errors import Unavailable
from api.domain.exports import ExportJob, ExportPhase
from api.domain.records import Record
from api.storage import codecs, keys
from api.storage.errors import error_code, translated
from api.storage.models import RecordItem
from api.storage.reads import TOTAL_CAPACITY, connection

# Parts read per Query of a download: at most 8 parts (of < 400 KB) held at once.
_PARTS_PER_READ = 8


class ExportTable:
    """The `ExportJobs` port (`api.service.exports`) on the single table."""

    def create(self, job: ExportJob, expires_at: int) -> None:
        """Store a new job (its id is fresh: a ULID)."""
        client = connection().client
        # Its id is fresh, so a job already there is this one: botocore retried a put
        # that DynamoDB applied and whose answer was lost.
        with translated(), contextlib.suppress(client.exceptions.ConditionalCheckFailedException):
            client.put_item(
                ReturnConsumedCapacity=TOTAL_CAPACITY,
                TableName=_table(),
                Item=_job_item(job, expires_at),
                ConditionExpression="attribute_not_exists(pk)",
            )

    def get(self, tenant_id: str, export_id: str) -> ExportJob | None:
        with translated():
            answer = connection().client.get_item(
                ReturnConsumedCapacity=TOTAL_CAPACITY,
                TableName=_table(),
                Key=codecs.raw_key(keys.export_pk(tenant_id), export_id),
                ConsistentRead=True,
            )
        raw = answer.get("Item")
        return None if raw is None else _job_from(tenant_id, raw)

    def advance(
        self, before: ExportJob, after: ExportJob, parts: list[bytes], expires_at: int
    ) -> bool:
        """Write `parts` (numbered from `before.parts`) and the job as `after`, both or
        neither; False when another call advanced the job first (nothing written)."""
        pk = keys.export_pk(before.tenant_id)
        actions: list[dict[str, Any]] = [
            {
                "Put": {
                    "TableName": _table(),
                    "Item": {
                        **codecs.raw_key(
                            pk, keys.export_part_sk(before.export_id, before.parts + i)
                        ),
                        "d": {"B": part},
                        keys.TTL_ATTRIBUTE: {"N": str(expires_at)},
                    },
                }
            }
            for i, part in enumerate(parts)
        ]
        actions.append(
            {
                "Put": {
                    "TableName": _table(),
                    "Item": _job_item(after, expires_at),
                    "ConditionExpression": "np = :np",
                    "ExpressionAttributeValues": {":np": {"N": str(before.parts)}},
                }
            }
        )
        with translated():
            try:
                connection().client.transact_write_items(
                    TransactItems=actions, ReturnConsumedCapacity=TOTAL_CAPACITY
                )
            except ClientError as exc:
                if error_code(exc) != "TransactionCanceledException":
                    raise
                reasons = exc.response.get("CancellationReasons", [])
                if any(r.get("Code") == "ConditionalCheckFailed" for r in reasons):
                    return False
                # TransactionConflict: another write held an item; the step is redone.
                raise Unavailable("the export's step met another write; retry") from exc
        return True

    def parts(self, tenant_id: str, export_id: str) -> Iterator[bytes]:
        """The file's parts in order, read a few at a time."""
        start: dict[str, Any] | None = None
        while True:
            kwargs: dict[str, Any] = {
                "TableName": _table(),
                "KeyConditionExpression": "pk = :pk AND begins_with(sk, :parts)",
                "ExpressionAttributeValues": {
                    ":pk": {"S": keys.export_pk(tenant_id)},
                    ":parts": {"S": keys.export_part_sk(export_id)},
                },
                "ConsistentRead": True,
                "Limit": _PARTS_PER_READ,
            }
            if start is not None:
                kwargs["ExclusiveStartKey"] = start
            with translated():
                page = connection().client.query(**kwargs, ReturnConsumedCapacity=TOTAL_CAPACITY)
            for item in page.get("Items", []):
                yield bytes(item["d"]["B"])
            start = page.get("LastEvaluatedKey")
            if start is None:
                return

    def versions_page(
        self, tenant_id: str, after: str | None, limit: int
    ) -> tuple[list[Record], str | None]:
        """Up to `limit` earlier versions of any entity, in key order, after the key
        `after` (None: from the first); and the key to go on from (None: the end)."""
        pk = keys.history_pk(tenant_id)
        kwargs: dict[str, Any] = {
            "TableName": _table(),
            "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": {":pk": {"S": pk}},
            "ConsistentRead": True,
            "Limit": limit,
        }
        if after is not None:
            kwargs["ExclusiveStartKey"] = codecs.raw_key(pk, after)
        with translated():
            page = connection().client.query(**kwargs, ReturnConsumedCapacity=TOTAL_CAPACITY)
        records = [codecs.record_from_raw(tenant_id, raw) for raw in page.get("Items", [])]
        last = page.get("LastEvaluatedKey")
        return records, None if last is None else str(last[codecs.SK]["S"])


def _table() -> str:
    return str(RecordItem.Meta.table_name)


def _job_item(job: ExportJob, expires_at: int) -> dict[str, Any]:
    item: dict[str, Any] = {
        **codecs.raw_key(keys.export_pk(job.tenant_id), job.export_id),
        "by": {"S": job.asked_by},
        "at": {"N": str(job.asked_at_ms)},
        "key": {"S": job.key},
        "ph": {"S": job.phase.value},
        "np": {"N": str(job.parts)},
        "ne": {"N": str(job.entities)},
        "nv": {"N": str(job.versions)},
        "nb": {"N": str(job.bytes)},
        keys.TTL_ATTRIBUTE: {"N": str(expires_at)},
    }
    if job.position is not None:
        item["cur"] = {"S": job.position}
    if job.change_token is not None:
        item["tok"] = {"S": job.change_token}
    return item


def _job_from(tenant_id: str, raw: dict[str, Any]) -> ExportJob:
    return ExportJob(
        tenant_id=tenant_id,
        export_id=raw[codecs.SK]["S"],
        asked_by=raw["by"]["S"],
        asked_at_ms=int(raw["at"]["N"]),
        key=raw["key"]["S"],
        phase=ExportPhase(raw["ph"]["S"]),
        position=raw["cur"]["S"] if "cur" in raw else None,
        parts=int(raw["np"]["N"]),
        entities=int(raw["ne"]["N"]),
        versions=int(raw["nv"]["N"]),
        bytes=int(raw["nb"]["N"]),
        change_token=raw["tok"]["S"] if "tok" in raw else None,
    )
