"""The batches of the table's stream that the fan-out gave up on.

Lambda retries a failed batch of the stream (halved each time:
`bisectBatchOnFunctionError`), and once the retries are spent sends a record of
it to the on-failure destination, an SQS queue (serverless.yml). That record
names the batch, not its records: `DDBStreamBatchInfo` holds the stream, the
shard and the first and last sequence numbers ("Retaining discarded records
for a DynamoDB event source", AWS Lambda Developer Guide). The drain reads the
batch back from the stream (which keeps records 24 hours) to learn its tenants;
it then pokes each with its head as it is now, which is at least as new as any
in the batch, so nothing of the batch is lost.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from botocore.exceptions import ClientError

from api.realtime.streams import head_changes

logger = logging.getLogger("api.realtime")

# GetRecords calls per failed batch at most: a batch holds at most 100 heads
# (serverless.yml's batchSize); between two heads lie a write's other records,
# three per entity written (entity, old and new log entries), at most 147 for a
# push of 49: about 15,000 records, 15 calls of 1,000. An open shard's tip may
# answer empty pages before the records, hence the margin.
MAX_READS = 100
# The batch's records are gone: older than the stream's 24 hours (trimmed), or the
# stream was replaced. Nothing can tell which tenants it held.
_UNREADABLE = {"TrimmedDataAccessException", "ResourceNotFoundException"}


class BatchNotRead(Exception):
    """The batch could not be read to its end within MAX_READS calls: try again."""


def tenants_in_batch(streams: Any, info: Mapping[str, Any]) -> set[str]:
    """The tenants whose heads changed in the stream batch `info` describes (an
    on-failure record's DDBStreamBatchInfo); `streams` is a dynamodbstreams client."""
    try:
        iterator = streams.get_shard_iterator(
            StreamArn=info["streamArn"],
            ShardId=info["shardId"],
            ShardIteratorType="AT_SEQUENCE_NUMBER",
            SequenceNumber=info["startSequenceNumber"],
        )["ShardIterator"]
    except ClientError as exc:
        if exc.response["Error"]["Code"] in _UNREADABLE:
            logger.error("a failed stream batch can no longer be read: %s", info)
            return set()
        raise
    end = int(info["endSequenceNumber"])
    tenants: set[str] = set()
    for _ in range(MAX_READS):
        page = streams.get_records(ShardIterator=iterator, Limit=1000)
        numbered = [(int(r["dynamodb"]["SequenceNumber"]), r) for r in page["Records"]]
        tenants |= set(head_changes(r for n, r in numbered if n <= end))
        iterator = page.get("NextShardIterator")
        if iterator is None or any(n >= end for n, _ in numbered):
            return tenants  # the batch's last record, or a closed shard's end
    raise BatchNotRead(f"the batch did not end within {MAX_READS} reads: {info}")
