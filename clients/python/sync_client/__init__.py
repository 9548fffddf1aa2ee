"""A reference offline sync client: the algorithm a mobile app should implement.

    from sync_client import SyncClient, HttpTransport
    client = SyncClient("device.sqlite3", "family1", HttpTransport(url, token))
    person_id = client.create("Person", {"givenName": "Ann"})   # offline: local + outbox
    photo = client.attach(jpeg_bytes, "image/jpeg")             # offline: kept locally
    client.update(person_id, {"photo": photo})                  # a reference {sha256,...}
    client.sync()                                               # upload, push, then pull
    client.open(photo["sha256"])                                # the bytes, local or fetched

Not used by the server. See docs/sync.md, "The recommended client algorithm".
"""

from sync_client.client import CorruptBlob, SyncClient, SyncReport
from sync_client.transport import (
    BlobTransport,
    HttpBlobTransport,
    HttpTransport,
    Transport,
    TransportError,
)

__all__ = [
    "BlobTransport",
    "CorruptBlob",
    "HttpBlobTransport",
    "HttpTransport",
    "SyncClient",
    "SyncReport",
    "Transport",
    "TransportError",
]
