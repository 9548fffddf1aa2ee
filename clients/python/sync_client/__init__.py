"""A reference offline sync client: the algorithm a mobile app should implement.

    from sync_client import SyncClient, HttpTransport
    client = SyncClient("device.sqlite3", "family1", HttpTransport(url, token))
    person_id = client.create("Person", {"givenName": "Ann"})   # offline: local + outbox
    client.sync()                                               # push, then pull

Not used by the server. See docs/sync.md, "The recommended client algorithm".
"""

from sync_client.client import SyncClient, SyncReport
from sync_client.transport import HttpTransport, Transport, TransportError

__all__ = ["HttpTransport", "SyncClient", "SyncReport", "Transport", "TransportError"]
