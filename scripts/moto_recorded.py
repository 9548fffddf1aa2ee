"""moto's server (`python -m moto.server`) with its recorder made safe to replay.

`scripts/serve` runs the local S3 engine through this file so that its blobs survive
a restart (`scripts.local_s3.LocalS3` with a recording): moto's own recorder
(`MOTO_ENABLE_RECORDING`, `MOTO_RECORDER_FILEPATH`) appends every request it receives
to a JSON Lines file, and `/moto-api/recorder/replay-recording` sends them again to
a fresh server. Two changes to it, for moto 5.2.5 (pinned in pyproject's dev extra):

- Concurrent requests are recorded one at a time. moto writes an entry and its
  newline in two writes, without a lock: with 16 parallel uploads of 300 KB, 13
  entries ended up glued on shared lines, and the replay stopped (500) at the first
  of them, losing every later upload. The body is read before the lock is taken, so a
  slow upload holds no one up.
- Reads (GET, HEAD, OPTIONS) are not recorded: they change nothing, and every
  `attachment` and /healthz call is one or two of them, which a replay would repeat.

Nothing else is changed: the entry is moto's, written by moto's code.
"""

from __future__ import annotations

import io
import threading
from typing import Any

from moto.moto_api._internal.recorder.models import Recorder
from moto.server import main

_READS = frozenset({"GET", "HEAD", "OPTIONS"})
_writing = threading.Lock()
_record = Recorder._record_request


def _record_writes(self: Recorder, request: Any, body: bytes | None = None) -> None:
    if not self._user_enabled or request.method in _READS:
        return
    if body is None:
        # As moto reads it (`Recorder._record_request`): Content-Length bytes of the
        # input, which is then handed back to the request as a new stream.
        body = b""
        length = request.headers.get("Content-Length")
        if length:
            body = request.environ["wsgi.input"].read(int(length))
            request.environ["wsgi.input"] = io.BytesIO(body)
    with _writing:
        _record(self, request, body)


Recorder._record_request = _record_writes  # type: ignore[method-assign]

if __name__ == "__main__":
    main()
