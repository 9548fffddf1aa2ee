"""Export jobs and the parts of their files, in the tenant's export partition
(`api.storage.keys`): a job item, and its file's parts `<export>#<n>`, each a gzip
member (their concatenation is one gzip file). A step's parts and the job's new
state are written by one transaction, conditioned on the job's progress as the
step read it (parts written, phase, parts published, upload): two calls racing on
one job cannot both advance it, and a step that dies writes nothing. Publishing
the file to S3 (`api.storage.export_files`) advances the job the same way."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any

from botocore.exceptions import ClientError

from api.domain.errors import Unavailable
from api.domain.exports import ExportJob, ExportPhase
from api.domain.records import Record
from api.domain.tokens import token_before
from api.storage import capacity, codecs, keys, reads
from api.storage.errors import error_code, translated
from api.storage.models import RecordItem
from api.storage.reads import TOTAL_CAPACITY, connection

# Parts read per Query while publishing: at most 8 parts (of < 400 KB) held at once
# beyond the S3 part being gathered.
_PARTS_PER_READ = 8
# The greatest part number the key format holds (`keys.export_part_sk`: 6 digits).
_LAST_PART = 999_999
# Entries a Query of the LeftView check reads at most (`ExportTable.left_view`), and
# what one entry costs it at its largest (some 18 KB, read consistently).
_LEFT_VIEW_ITEMS = 100
_ENTRY_READ_UNITS = 4.5
_ID, _LEFT_VIEW = RecordItem.id.attr_name, RecordItem.left_view.attr_name


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
        if raw is not None and raw["ph"]["S"] == ExportPhase.DONE.value and "pn" not in raw:
            raw = self._publish_again(raw)
        return None if raw is None else _job_from(tenant_id, raw)

    def _publish_again(self, raw: dict[str, Any]) -> dict[str, Any] | None:
        """A job finished before files were published to S3 (done, with no part
        published: its file is only in the table, which the API served) goes back to
        publishing, so that the next step puts its file in S3 (a new job is done only
        once its parts, at least the header's, are published)."""
        key = {codecs.PK: raw[codecs.PK], codecs.SK: raw[codecs.SK]}
        client = connection().client
        try:
            with translated():
                answer = client.update_item(
                    ReturnConsumedCapacity=TOTAL_CAPACITY,
                    TableName=_table(),
                    Key=key,
                    UpdateExpression="SET ph = :publish",
                    ConditionExpression="ph = :done AND attribute_not_exists(pn)",
                    ExpressionAttributeValues={
                        ":publish": {"S": ExportPhase.PUBLISH.value},
                        ":done": {"S": ExportPhase.DONE.value},
                    },
                    ReturnValues="ALL_NEW",
                )
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise
            # Another call moved it first (or the job is gone): as it stands now.
            with translated():
                again = client.get_item(
                    ReturnConsumedCapacity=TOTAL_CAPACITY,
                    TableName=_table(),
                    Key=key,
                    ConsistentRead=True,
                )
            return again.get("Item")
        return dict(answer["Attributes"])

    def advance(
        self, before: ExportJob, after: ExportJob, parts: list[bytes], expires_at: int
    ) -> bool:
        """Write `parts` (numbered from `before.parts`) and the job as `after`, both or
        neither; False when another call advanced the job first (nothing written)."""
        if not parts:  # a step of publishing: the job alone, a conditioned PutItem
            client = connection().client
            with translated():
                try:
                    client.put_item(
                        ReturnConsumedCapacity=TOTAL_CAPACITY,
                        TableName=_table(),
                        Item=_job_item(after, expires_at),
                        **_as(before),
                    )
                except client.exceptions.ConditionalCheckFailedException:
                    return False
            return True
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
            {"Put": {"TableName": _table(), "Item": _job_item(after, expires_at), **_as(before)}}
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

    def parts(self, tenant_id: str, export_id: str, start: int = 0) -> Iterator[bytes]:
        """The file's parts in order from part `start`, read a few at a time (consistent:
        the last step's parts were written a moment ago)."""
        after: dict[str, Any] | None = None
        while True:
            kwargs: dict[str, Any] = {
                "TableName": _table(),
                "KeyConditionExpression": "pk = :pk AND sk BETWEEN :first AND :last",
                "ExpressionAttributeValues": {
                    ":pk": {"S": keys.export_pk(tenant_id)},
                    ":first": {"S": keys.export_part_sk(export_id, start)},
                    ":last": {"S": keys.export_part_sk(export_id, _LAST_PART)},
                },
                "ConsistentRead": True,
                "Limit": _PARTS_PER_READ,
            }
            if after is not None:
                kwargs["ExclusiveStartKey"] = after
            with translated():
                page = connection().client.query(**kwargs, ReturnConsumedCapacity=TOTAL_CAPACITY)
            for item in page.get("Items", []):
                yield bytes(item["d"]["B"])
            after = page.get("LastEvaluatedKey")
            if after is None:
                return

    def versions_page(
        self, tenant_id: str, after: str | None, limit: int, upto: str, max_read: int
    ) -> tuple[list[Record], str | None]:
        """Up to `limit` earlier versions of any entity written at or before the token
        `upto`, in key order, after the key `after` (None: from the first), reading at
        most `max_read` items; and the key to go on from (None: the end)."""
        history = keys.history_pk(tenant_id)
        return reads.versions_upto(tenant_id, history, after, upto, limit, max_read)

    def left_view(
        self, tenant_id: str, principals: Sequence[str], after: str, max_read_units: float
    ) -> tuple[set[str], bool, str | None]:
        """The ids of the LeftView sentinels above the token `after` in the tenant's main
        log and the streams of `principals`; whether every partition was read to its
        end within `max_read_units`, or about (consistent Queries; a sentinel is told
        apart from other entries by an attribute, not by its key, so a Query reads
        every entry above `after` and its filter keeps the sentinels: each page is
        sized to the units left, an entry counted at its largest until the pages so
        far show what one costs, twice that); and the token up to which they hold
        every entry (None: no head): the head, read first (consistent), proves every
        entry below its transaction's applied (docs/ordering.md, Lemma 2s). A tenant
        that never restricted a record (its head without `vis`) holds no sentinel: the
        head's read alone."""
        head = reads.head(tenant_id)
        proven = None if head is None else token_before(head.entry_tokens()[0])
        if head is not None and not head.restricted:
            # No record of the tenant was ever restricted: no write put a sentinel.
            return set(), True, proven
        partitions = [keys.log_pk(tenant_id), *(keys.stream_pk(tenant_id, p) for p in principals)]
        found: set[str] = set()
        spent, per_entry, observed = 0.0, _ENTRY_READ_UNITS, 0.0
        for pk in partitions:
            start: dict[str, Any] | None = None
            while True:
                limit = min(_LEFT_VIEW_ITEMS, int((max_read_units - spent) // per_entry))
                if limit < 1:
                    return found, False, proven
                page = reads.query(
                    pk,
                    reads._sk("#sk > :after", after=after),
                    limit,
                    start_key=start,
                    projected={"#id": _ID},
                    kept=("attribute_exists(#lv)", {"#lv": _LEFT_VIEW}),
                )
                units = float(page.get("ConsumedCapacity", {}).get("CapacityUnits", 0.0))
                spent += units
                scanned = int(page.get("ScannedCount", 0))
                if scanned:
                    observed = max(observed, units / scanned)
                    per_entry = min(_ENTRY_READ_UNITS, 2 * observed)
                found.update(item[_ID]["S"] for item in page.get("Items", []))
                start = page.get("LastEvaluatedKey")
                if start is None:
                    break
        return found, True, proven

    def metered(self) -> AbstractContextManager[capacity.Meter]:
        """A meter of the DynamoDB capacity consumed in this context meanwhile."""
        return capacity.metered()


def _table() -> str:
    return str(RecordItem.Meta.table_name)


def _as(before: ExportJob) -> dict[str, Any]:
    """The condition that the stored job is still `before`: its parts written, phase,
    parts published and upload (what every step changes at least one of)."""
    values: dict[str, Any] = {
        ":np": {"N": str(before.parts)},
        ":ph": {"S": before.phase.value},
    }
    conditions = ["np = :np", "ph = :ph"]
    if before.published:
        conditions.append("pn = :pn")
        values[":pn"] = {"N": str(before.published)}
    else:
        conditions.append("attribute_not_exists(pn)")
    if before.upload_id is not None:
        conditions.append("up = :up")
        values[":up"] = {"S": before.upload_id}
    else:
        conditions.append("attribute_not_exists(up)")
    return {
        "ConditionExpression": " AND ".join(conditions),
        "ExpressionAttributeValues": values,
    }


def _job_item(job: ExportJob, expires_at: int) -> dict[str, Any]:
    item: dict[str, Any] = {
        **codecs.raw_key(keys.export_pk(job.tenant_id), job.export_id),
        "by": {"S": job.asked_by},
        "at": {"N": str(job.asked_at_ms)},
        "ph": {"S": job.phase.value},
        "np": {"N": str(job.parts)},
        "ne": {"N": str(job.entities)},
        "nv": {"N": str(job.versions)},
        "nb": {"N": str(job.bytes)},
        keys.TTL_ATTRIBUTE: {"N": str(expires_at)},
    }
    if job.groups:
        item["grp"] = {"L": [{"S": group} for group in job.groups]}
    if job.position is not None:
        item["cur"] = {"S": job.position}
    if job.change_token is not None:
        item["tok"] = {"S": job.change_token}
    if job.history_token is not None:
        item["htk"] = {"S": job.history_token}
    if job.begun is not None:
        item["btk"] = {"S": job.begun}
    if job.checked is not None:
        item["ctk"] = {"S": job.checked}
    if job.published:
        item["pn"] = {"N": str(job.published)}
    if job.upload_id is not None:
        item["up"] = {"S": job.upload_id}
    if job.etags:
        item["et"] = {"L": [{"S": etag} for etag in job.etags]}
    return item


def _job_from(tenant_id: str, raw: dict[str, Any]) -> ExportJob:
    return ExportJob(
        tenant_id=tenant_id,
        export_id=raw[codecs.SK]["S"],
        asked_by=raw["by"]["S"],
        asked_at_ms=int(raw["at"]["N"]),
        groups=tuple(g["S"] for g in raw.get("grp", {}).get("L", [])),
        phase=ExportPhase(raw["ph"]["S"]),
        position=raw["cur"]["S"] if "cur" in raw else None,
        parts=int(raw["np"]["N"]),
        entities=int(raw["ne"]["N"]),
        versions=int(raw["nv"]["N"]),
        bytes=int(raw["nb"]["N"]),
        change_token=raw["tok"]["S"] if "tok" in raw else None,
        history_token=raw["htk"]["S"] if "htk" in raw else None,
        begun=raw["btk"]["S"] if "btk" in raw else None,
        checked=raw["ctk"]["S"] if "ctk" in raw else None,
        published=int(raw["pn"]["N"]) if "pn" in raw else 0,
        upload_id=raw["up"]["S"] if "up" in raw else None,
        etags=tuple(e["S"] for e in raw.get("et", {}).get("L", [])),
    )
