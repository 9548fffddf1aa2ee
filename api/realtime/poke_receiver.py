"""The follower's side of the relay (`api.realtime.relay`): `POST
/internal/pokes`, its headers checked before its body, each post taken once."""

from __future__ import annotations

import hmac
import json
import logging
import re
import secrets
import threading
import time
from collections.abc import Callable

from starlette.requests import Request
from starlette.responses import Response

from api.domain.audiences import Audience
from api.domain.errors import BadUserInput
from api.domain.identifiers import check_identifier
from api.realtime.poke_posts import audiences_of
from api.realtime.relay import (
    EPOCH_HEADER,
    MAX_NUMBER,
    PROBE_EPOCH,
    SEQ_HEADER,
    SIGNATURE_HEADER,
    TO_HEADER,
    WINDOW,
    signature,
)
from api.realtime.signals import is_deletion
from api.worker_threads import RunBlocking, anyio_pool

logger = logging.getLogger("api.realtime")

TOKEN = re.compile(r"[0-9A-Z]{26}")  # a ULID, as change tokens are


class PokeReceiver:
    """The follower's side: `POST /internal/pokes`. Its headers are checked before
    the body is read: a post for another server (a URL that reaches the wrong
    process) is answered 409, so the reader keeps it, and so is one whose (epoch,
    number) was taken, or is of an earlier epoch or below the window of numbers
    kept (a replay). Then the signature over the headers and the body (capped by the
    request middleware): an unsigned post costs one HMAC. Catch-ups run one at a
    time, and a post finds its catch-up made when one that started after it arrived
    has finished."""

    def __init__(
        self,
        server_id: str,
        key: bytes,
        publish: Callable[[str, str, Audience], None],
        catch_up: Callable[[], None],
        run_blocking: RunBlocking | None = None,
    ) -> None:
        self.server_id = server_id
        self._run_blocking = run_blocking or anyio_pool()  # the app's (`api.worker_threads`)
        self._key = key
        self._publish = publish
        self._catch_up = catch_up  # blocking: reads and publishes the subscribed heads
        self._catching_up = threading.Lock()
        self._last_catch_up_started = 0.0
        self._lock = threading.Lock()
        self._newest = (0, 0)  # the highest (epoch, number) taken
        self._taken: set[int] = set()  # numbers of its epoch taken within the window
        self._nonces: set[int] = set()  # of this process's probes not yet answered
        self.refused = 0  # posts refused as not newer (replays, late arrivals)

    def nonce(self) -> int:
        """A nonce for a probe of this server's own URL (`probe`)."""
        nonce = secrets.randbelow(MAX_NUMBER)
        with self._lock:
            self._nonces.add(nonce)
        return nonce

    async def take(self, request: Request) -> Response:
        headers = request.headers
        try:
            to = headers[TO_HEADER]
            epoch, seq = int(headers[EPOCH_HEADER]), int(headers[SEQ_HEADER])
            if not (0 <= epoch < MAX_NUMBER and 0 <= seq < MAX_NUMBER):
                raise ValueError
        except (KeyError, ValueError):
            return Response("not a signed post", status_code=403)
        if to != self.server_id:
            return Response("not this server", status_code=409)
        if epoch != PROBE_EPOCH and not self._new(epoch, seq):
            self.refused += 1
            return Response("not newer than a post taken", status_code=409)
        body = await request.body()
        sent = headers.get(SIGNATURE_HEADER, "").encode("latin-1")
        if not hmac.compare_digest(sent, signature(self._key, to, epoch, seq, body).encode()):
            return Response("bad signature", status_code=403)
        with self._lock:
            if epoch == PROBE_EPOCH:
                if seq not in self._nonces:
                    return Response("not this server's nonce", status_code=409)
                self._nonces.discard(seq)
                return Response(status_code=204)
            if not self._new(epoch, seq):  # another post with it came meanwhile
                self.refused += 1
                return Response("not newer than a post taken", status_code=409)
            self._take_number(epoch, seq)
        try:
            message = json.loads(body)
            pokes, catch_up = message["pokes"], message["catchUp"]
            if not isinstance(pokes, dict) or not isinstance(catch_up, bool):
                raise TypeError
            entries = [(t, token) for t, token in pokes.items() if _is_poke(t, token)]
            audiences = audiences_of(message)
            if len(entries) != len(pokes):
                raise ValueError
        except (ValueError, KeyError, TypeError):
            return Response("bad pokes", status_code=400)
        for tenant_id, token in entries:
            self._publish(tenant_id, token, audiences.get(tenant_id))
        if catch_up:
            try:
                await self._run_blocking(self._catch_up_once, time.monotonic())
            except Exception:  # the reader posts the catch-up again
                logger.exception("catching up on the reader's request failed")
                return Response("catch-up failed", status_code=503)
        return Response(status_code=204)

    def _new(self, epoch: int, seq: int) -> bool:
        """Whether a post (epoch, seq) was never taken: of the highest epoch taken (or
        a later one), and a number above the highest, or one within WINDOW below it
        not taken yet (the reader's posts in flight at once arrive in any order)."""
        newest_epoch, newest_seq = self._newest
        if epoch != newest_epoch:
            return epoch > newest_epoch
        if seq > newest_seq:
            return True
        return seq > newest_seq - WINDOW and seq not in self._taken

    def _take_number(self, epoch: int, seq: int) -> None:
        if epoch != self._newest[0]:
            self._taken.clear()  # a later reader: the earlier one's numbers are refused
        self._taken.add(seq)
        newest = max(seq, self._newest[1]) if epoch == self._newest[0] else seq
        self._newest = (epoch, newest)
        if len(self._taken) > 2 * WINDOW:  # forget what fell below the window
            self._taken = {n for n in self._taken if n > newest - WINDOW}

    def _catch_up_once(self, arrived: float) -> None:
        with self._catching_up:
            if self._last_catch_up_started > arrived:
                return  # one that began after this post arrived has read the heads
            started = time.monotonic()
            self._catch_up()
            self._last_catch_up_started = started


def _is_poke(tenant_id: object, token: object) -> bool:
    """A tenant id and a change token (or a deletion's mark), as only a head can hold."""
    if not isinstance(token, str) or not (is_deletion(token) or TOKEN.fullmatch(token)):
        return False
    try:
        check_identifier(tenant_id, "tenantID")  # type: ignore[arg-type]
    except BadUserInput:
        return False
    return True
