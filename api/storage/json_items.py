"""Query responses decoded with `json.loads` instead of botocore's shape walker.

botocore turns a response into Python by walking the operation's output shape
value by value. For a `changes` page of 100 people (48 KB) that walk took 3.0 ms
on the bench machine, against 0.3 ms for `json.loads` of the same body: half of
the raw Query's whole time, paid again on every page a client syncs.

DynamoDB speaks JSON, and for every attribute type but binary the two decodings
give the same Python values (strings stay strings, numbers stay strings in
`{"N": ...}`, maps, lists, booleans and nulls are plain JSON). Binary values
(`B`, `BS`) are base64 in the JSON and bytes after botocore. So: a successful
Query whose body holds no binary value has its items taken from `json.loads`,
and botocore parses what is left (Count, LastEvaluatedKey, ConsumedCapacity).
Anything else goes through botocore unchanged.
"""

from __future__ import annotations

import json
from typing import Any

EVENT = "before-parse.dynamodb.Query"

# A binary attribute value appears in the body as one of these. Inside a JSON
# string a quote is escaped (`\"B\"`), so user text cannot produce them; a key
# of a map named "B" can, and only costs the slow path.
_BINARY_MARKERS = (b'"B"', b'"BS"')


def decode_items_with_json(
    response_dict: dict[str, Any], customized_response_dict: dict[str, Any], **_: Any
) -> None:
    """botocore `before-parse` handler: set `Items` ourselves, leave botocore the rest."""
    body = response_dict.get("body")
    if response_dict.get("status_code") != 200 or not isinstance(body, bytes):
        return
    if any(marker in body for marker in _BINARY_MARKERS):
        return
    try:
        parsed = json.loads(body)
    except ValueError:
        return  # botocore reports it
    if not isinstance(parsed, dict) or not isinstance(parsed.get("Items"), list):
        return
    customized_response_dict["Items"] = parsed.pop("Items")
    response_dict["body"] = json.dumps(parsed).encode()


def install(client: Any) -> None:
    client.meta.events.register(EVENT, decode_items_with_json, unique_id=__name__)
