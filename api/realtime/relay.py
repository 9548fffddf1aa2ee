"""The stream reader hands head changes to the other servers over HTTP.

One server reads the table's stream (`api.realtime.lease` chooses it). It publishes
each head change to its own subscribers and offers it to the relay, which posts
it to every other server that has subscribers (`POST /internal/pokes`, signed
with a key derived from the cursor secret that all servers share).

Per follower the relay keeps only the newest token of each tenant not yet
delivered, so a burst of writes is one entry and a follower that is down for a
while costs one entry per tenant written meanwhile; past 10,000 tenants the
entries are dropped for a catch-up instead. A failed post (refused, timed out,
its answer lost) is retried with backoff until it succeeds or the follower's
registration lapses; a follower that gets a poke twice sends its subscribers
nothing new (each event is newer than the last, `api.realtime.signals`).

**Catch-up, so that no hole opens between reader and follower.** A follower
reads the heads of its subscribed tenants (1 read unit each) when the post says
`catchUp`, and answers only after that read, so a failed catch-up is retried.
The relay asks for one in the first post to a follower it has not posted to
(a new follower, or any follower under a new reader) and after each (re)start
of its stream reading: a write whose stream record was read before the
follower's entries existed committed before that read (a transaction reaches
the stream only once complete), so the catch-up's consistent read sees it; a
record read after is in the entries.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import logging
import re
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from api.domain.errors import BadUserInput
from api.domain.identifiers import check_identifier
from api.realtime.signals import DELETING

logger = logging.getLogger("api.realtime")

_TOKEN = re.compile(r"[0-9A-Z]{26}")  # a ULID, as change tokens are

PATH = "/internal/pokes"
SIGNATURE_HEADER = "x-poke-signature"
# Entries kept per follower before they are traded for a catch-up read.
MAX_PENDING_TENANTS = 10_000
# Tenants per post: 2,000 entries of about 70 bytes stay far below the 1 MB body cap.
POST_TENANTS = 2_000
# A post that takes longer failed (its follower is slow or gone); retried after
# 0.25 s, doubling up to 5 s. A post that asks for a catch-up waits for the
# follower's read of its heads: 10,000 subscribed tenants are 100 BatchGetItem
# calls, a second or two; cut off sooner, it would be asked again and again.
POST_TIMEOUT_S = 2.0
CATCH_UP_TIMEOUT_S = 30.0
_BACKOFF_S = (0.25, 5.0)
# Servers post to each other directly, never through a proxy named in the environment.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def relay_key(cursor_secret: str) -> bytes:
    """The key that signs posts between servers, derived from the shared cursor secret
    (one secret less to deploy; a cursor signature can never pass for a post)."""
    return hmac.new(cursor_secret.encode(), b"realtime relay", hashlib.sha256).digest()


def _signature(key: bytes, body: bytes) -> str:
    return hmac.new(key, body, hashlib.sha256).hexdigest()


class _Follower:
    """What one follower has still to get, and the thread that posts it."""

    def __init__(
        self, server_id: str, url: str, key: bytes, post_timeout_s: float, ready: threading.Event
    ) -> None:
        self.server_id = server_id
        self.url = url.rstrip("/") + PATH
        self._ready = ready
        self._key = key
        self._post_timeout_s = post_timeout_s
        self._lock = threading.Lock()
        self._pokes: dict[str, str] = {}
        self._catch_up = True  # the first post makes it catch up
        self._waiting = threading.Event()
        self._waiting.set()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="poke-relay", daemon=True)
        self._thread.start()

    def offer(self, tenant_id: str, token: str) -> None:
        with self._lock:
            if token > self._pokes.get(tenant_id, ""):
                self._pokes[tenant_id] = token
            if len(self._pokes) > MAX_PENDING_TENANTS:
                self._pokes.clear()
                self._catch_up = True
        self._waiting.set()

    def catch_up(self) -> None:
        with self._lock:
            self._catch_up = True
        self._waiting.set()

    def stop(self) -> None:
        self._stopped.set()
        self._waiting.set()

    def _take(self) -> tuple[dict[str, str], bool]:
        with self._lock:
            tenants = list(self._pokes)[:POST_TENANTS]
            pokes = {t: self._pokes.pop(t) for t in tenants}
            catch_up, self._catch_up = self._catch_up, False
            if self._pokes:
                self._waiting.set()
            return pokes, catch_up

    def _give_back(self, pokes: dict[str, str], catch_up: bool) -> None:
        for tenant_id, token in pokes.items():
            self.offer(tenant_id, token)
        if catch_up:
            self.catch_up()

    def _run(self) -> None:
        backoff = _BACKOFF_S[0]
        # Nothing goes out before the reader has taken its iterators: a catch-up
        # before then would have to be made again (and costs a read unit a tenant).
        while not self._ready.wait(0.5):
            if self._stopped.is_set():
                return
        while not self._stopped.is_set():
            self._waiting.wait()
            self._waiting.clear()
            if self._stopped.is_set():
                return
            pokes, catch_up = self._take()
            if not pokes and not catch_up:
                continue
            body = json.dumps({"to": self.server_id, "catchUp": catch_up, "pokes": pokes}).encode()
            if self._post(body, CATCH_UP_TIMEOUT_S if catch_up else self._post_timeout_s):
                backoff = _BACKOFF_S[0]
                continue
            self._give_back(pokes, catch_up)
            logger.warning("posting pokes to %s failed; again in %s s", self.url, backoff)
            self._stopped.wait(backoff)
            backoff = min(backoff * 2, _BACKOFF_S[1])

    def _post(self, body: bytes, timeout_s: float) -> bool:
        """Whether the follower took `body` (204)."""
        request = urllib.request.Request(
            self.url,
            data=body,
            method="POST",
            headers={
                SIGNATURE_HEADER: _signature(self._key, body),
                "content-type": "application/json",
            },
        )
        try:
            with _DIRECT.open(request, timeout=timeout_s) as answer:
                return bool(answer.status == 204)
        except (OSError, http.client.HTTPException):  # refused, timed out, reset, 4xx/5xx
            return False
        except Exception:  # a URL urllib cannot use: say so, keep the thread alive
            logger.exception("posting pokes to %s failed", self.url)
            return False


class PokeRelay:
    """The reader's side: the followers it posts to, each with its own entries."""

    def __init__(self, key: bytes, post_timeout_s: float = POST_TIMEOUT_S) -> None:
        self._key = key
        self._post_timeout_s = post_timeout_s
        self._lock = threading.Lock()
        self._followers: dict[str, _Follower] = {}
        self._ready = threading.Event()  # set by the reader's first catch_up()

    def follow(self, servers: Mapping[str, str]) -> None:
        """The followers are now `servers` (id -> URL): new ones catch up first, those
        gone are dropped with what they had still to get."""
        with self._lock:
            for server_id in set(self._followers) - set(servers):
                self._followers.pop(server_id).stop()
            for server_id, url in servers.items():
                known = self._followers.get(server_id)
                if known is None or known.url != url.rstrip("/") + PATH:
                    if known is not None:
                        known.stop()
                    self._followers[server_id] = _Follower(
                        server_id, url, self._key, self._post_timeout_s, self._ready
                    )

    def offer(self, tenant_id: str, token: str) -> None:
        with self._lock:
            followers = list(self._followers.values())
        for follower in followers:
            follower.offer(tenant_id, token)

    def catch_up(self) -> None:
        """Every follower catches up with its next post: the reader has (re)taken its
        iterators and read its own subscribed heads."""
        self._ready.set()
        with self._lock:
            followers = list(self._followers.values())
        for follower in followers:
            follower.catch_up()

    def stop(self) -> None:
        self.follow({})


class PokeReceiver:
    """The follower's side: `POST /internal/pokes`. The signature is checked before
    the body is parsed (the body is already capped by the request middleware), so an
    unsigned post costs one HMAC. A post for another server (a URL that reaches the
    wrong process) is answered 409, so the reader keeps it. Catch-ups run one at a
    time, and a post finds its catch-up made when one that started after it arrived
    has finished: replayed or repeated posts cost at most one read of the heads in
    turn, never a pile of them."""

    def __init__(
        self,
        server_id: str,
        key: bytes,
        publish: Callable[[str, str], None],
        catch_up: Callable[[], None],
    ) -> None:
        self.server_id = server_id
        self._key = key
        self._publish = publish
        self._catch_up = catch_up  # blocking: reads and publishes the subscribed heads
        self._catching_up = threading.Lock()
        self._last_catch_up_started = 0.0

    async def take(self, request: Request) -> Response:
        body = await request.body()
        signature = request.headers.get(SIGNATURE_HEADER, "").encode("latin-1")
        if not hmac.compare_digest(signature, _signature(self._key, body).encode()):
            return Response("bad signature", status_code=403)
        try:
            message = json.loads(body)
            pokes, catch_up = message["pokes"], message["catchUp"]
            if not isinstance(pokes, dict) or not isinstance(catch_up, bool):
                raise TypeError
            entries = [(t, token) for t, token in pokes.items() if _is_poke(t, token)]
            if len(entries) != len(pokes):
                raise ValueError
        except (ValueError, KeyError, TypeError):
            return Response("bad pokes", status_code=400)
        if message.get("to") != self.server_id:
            return Response("not this server", status_code=409)
        for tenant_id, token in entries:
            self._publish(tenant_id, token)
        if catch_up:
            try:
                await run_in_threadpool(self._catch_up_once, time.monotonic())
            except Exception:  # the reader posts the catch-up again
                logger.exception("catching up on the reader's request failed")
                return Response("catch-up failed", status_code=503)
        return Response(status_code=204)

    def _catch_up_once(self, arrived: float) -> None:
        with self._catching_up:
            if self._last_catch_up_started > arrived:
                return  # one that began after this post arrived has read the heads
            started = time.monotonic()
            self._catch_up()
            self._last_catch_up_started = started


def _is_poke(tenant_id: object, token: object) -> bool:
    """A tenant id and a change token (or DELETING), as only a head can hold."""
    if not isinstance(token, str) or not (token == DELETING or _TOKEN.fullmatch(token)):
        return False
    try:
        check_identifier(tenant_id, "tenantID")  # type: ignore[arg-type]
    except BadUserInput:
        return False
    return True
