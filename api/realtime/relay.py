"""The stream reader hands head changes to the other servers over HTTP.

One server reads the table's stream (`api.realtime.lease` chooses it). It publishes
each head change to its own subscribers and offers it to the relay, which posts
it to every other server that has subscribers (`POST /internal/pokes`, signed
with a key derived from the cursor secret that all servers share).

Per follower the relay keeps only the newest token of each tenant not yet
delivered, for whoever any of its changes was for (`api.realtime.poke_posts`), so
a burst of writes is one entry and a follower down for a while costs one entry
per tenant written meanwhile; past 10,000 tenants the entries are dropped for a
catch-up instead. A failed post (refused, timed out,
its answer lost) is retried with backoff until it succeeds or the follower's
registration lapses; a follower that gets a poke twice sends its subscribers
nothing new (each event is newer than the last, `api.realtime.signals`).

**Posts do not queue behind each other.** Each follower has SENDERS threads, each
posting over a connection it keeps open (HTTP keep-alive), so a post waits for no
other's answer: a catch-up (the follower reads its heads before it answers) or a
slow post holds back no poke behind it (one at a time: p50 750 ms, p99 4.2 s).

**Catch-up, so that no hole opens between reader and follower.** A follower
reads the heads of its subscribed tenants (1 read unit each) when the post says
`catchUp`, and answers only after that read, so a failed catch-up is retried.
The relay asks for one in the first post to a follower it has not posted to
(a new follower, or any follower under a new reader) and after each (re)start
of its stream reading: a write whose stream record was read before the
follower's entries existed committed before that read (a transaction reaches
the stream only once complete), so the catch-up's consistent read sees it; a
record read after is in the entries.

**A post counts once, and only for the server it names.** Whoever sees the traffic
between servers could capture posts and send them again; the signature alone
would let a deletion's poke end a tenant written again since, and a flood of old
catch-ups read heads without end. So a post's headers carry the server it is for,
the reader's epoch (the lease's counter when it took the lease: a later reader's
is higher, `api.realtime.lease`) and a sequence number the reader raises for each
post; the signature covers them with the body. A follower keeps the highest
(epoch, sequence) it took, and the numbers it took of the last WINDOW below it,
and refuses, with a 409 and before it reads the body, any post of an older epoch,
of a number it took, or of one below that window: a replay costs the parsing of
three headers. Posts sent at once may arrive out of order, so a number below the
highest is taken once if it is in the window. No clock is compared between
servers. A retried post goes with a new number (its entries may have changed
meanwhile); one that comes late after its retry is taken too, its tokens older
than what the retry delivered (no subscriber is sent one not newer than its last).

A deletion's poke also names the tenant's last token before it
(`DELETING/<token>`, `api.realtime.signals`): a subscription that already holds a
newer token (the tenant was written again) is not ended by it.

**Each server checks that its `REALTIME_PEER_URL` reaches it** (`probe`): a
signed nonce posted to itself, answered 204 only by the process that issued it.
A URL that reaches another process (a load balancer's, another server's) or
nothing is found out at start and again when the server joins the lease, and the
server reads the stream itself instead (`api.realtime.local`).

This module holds the posts' format and the reader's side; the follower's is
`api.realtime.poke_receiver`.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import logging
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping

from api.domain.audiences import Audience, coalesced
from api.realtime.poke_posts import post_body

logger = logging.getLogger("api.realtime")


PATH = "/internal/pokes"
SIGNATURE_HEADER = "x-poke-signature"
# Signed with the body: the server a post is for, the reader's epoch, the post's number.
TO_HEADER = "x-poke-to"
EPOCH_HEADER = "x-poke-epoch"
SEQ_HEADER = "x-poke-seq"
# A probe (`probe`) has epoch 0 and its nonce as number; no reader's epoch is 0.
PROBE_EPOCH = 0
MAX_NUMBER = 2**63
# Entries kept per follower before they are traded for a catch-up read.
MAX_PENDING_TENANTS = 10_000
# Tenants per post: 2,000 entries of about 70 bytes stay far below the 1 MB body cap.
POST_TENANTS = 2_000
# Posts in flight to one follower at most (each from its own thread and connection).
SENDERS = 4
# Numbers below the highest taken that a follower still takes once (posts sent at
# once, arriving out of order): far more than SENDERS posts can overtake another.
WINDOW = 256
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


def signature(key: bytes, to: str, epoch: int, seq: int, body: bytes) -> str:
    mac = hmac.new(key, f"{to}\n{epoch}\n{seq}\n".encode(), hashlib.sha256)
    mac.update(body)
    return mac.hexdigest()


def _headers(key: bytes, to: str, epoch: int, seq: int, body: bytes) -> dict[str, str]:
    return {
        TO_HEADER: to,
        EPOCH_HEADER: str(epoch),
        SEQ_HEADER: str(seq),
        SIGNATURE_HEADER: signature(key, to, epoch, seq, body),
        "content-type": "application/json",
    }


def _send(url: str, body: bytes, headers: dict[str, str], timeout_s: float) -> tuple[int, str]:
    """POST `body`; the answer's status and a few words of it (status 0: no answer,
    the words say why)."""
    request = urllib.request.Request(url, data=body, method="POST", headers=headers)
    try:
        with _DIRECT.open(request, timeout=timeout_s) as answer:
            return int(answer.status), answer.read(200).decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:  # 4xx/5xx
        try:
            said = exc.read(200).decode("utf-8", "replace")
        except Exception:
            said = ""
        return exc.code, said
    except urllib.error.URLError as exc:  # refused, unreachable
        return 0, str(exc.reason)
    except (OSError, http.client.HTTPException) as exc:  # timed out, reset
        return 0, str(exc) or type(exc).__name__
    except Exception as exc:  # a URL urllib cannot use: say so, keep the thread alive
        logger.exception("posting to %s failed", url)
        return 0, str(exc) or type(exc).__name__


# How a kept-open connection the other end closed fails a request sent on it.
_STALE = (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected)


class _Connection:
    """One kept-open HTTP connection to a follower's URL, made again after a failure."""

    def __init__(self, url: str) -> None:
        parts = urllib.parse.urlsplit(url)
        self._https = parts.scheme == "https"
        self._host = parts.netloc
        self._path = parts.path or "/"
        self._connection: http.client.HTTPConnection | None = None

    def post(self, body: bytes, headers: dict[str, str], timeout_s: float) -> tuple[int, str]:
        """POST `body`: the answer's status and a few words of it (0: no answer)."""
        reused = self._connection is not None and self._connection.sock is not None
        try:
            return self._post(body, headers, timeout_s)
        except _STALE as exc:
            self.close()
            if not reused:
                return 0, str(exc) or type(exc).__name__
        except Exception as exc:  # refused, timed out: a new connection next time
            self.close()
            return 0, str(exc) or type(exc).__name__
        # A kept connection the follower closed meanwhile (uvicorn closes one idle for
        # 5 s): the post never reached it, so it goes again at once on a new one.
        # (Had it arrived, the second is refused as a number taken, and retried.)
        try:
            return self._post(body, headers, timeout_s)
        except Exception as exc:
            self.close()
            return 0, str(exc) or type(exc).__name__

    def _post(self, body: bytes, headers: dict[str, str], timeout_s: float) -> tuple[int, str]:
        if self._connection is None:
            kind = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
            self._connection = kind(self._host, timeout=timeout_s)
        connection = self._connection
        connection.timeout = timeout_s
        if connection.sock is not None:
            connection.sock.settimeout(timeout_s)
        connection.request("POST", self._path, body=body, headers=headers)
        answer = connection.getresponse()
        said = answer.read().decode("utf-8", "replace")[:200]  # all of it: kept open
        if answer.will_close:
            self.close()
        return answer.status, said

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None


def _said(status: int, words: str) -> str:
    return f"answer {status} {words}".rstrip() if status else f"no answer: {words}"


def probe(url: str, key: bytes, server_id: str, nonce: int, timeout_s: float) -> tuple[int, str]:
    """Post a signed `nonce` for `server_id` to `url`: the answer's status (204 only
    from the process that issued the nonce; 0: no answer) and a few words of it."""
    body = b"{}"
    headers = _headers(key, server_id, PROBE_EPOCH, nonce, body)
    return _send(url.rstrip("/") + PATH, body, headers, timeout_s)


class _Follower:
    """What one follower has still to get, and the thread that posts it."""

    def __init__(
        self,
        server_id: str,
        url: str,
        key: bytes,
        post_timeout_s: float,
        ready: threading.Event,
        stamp: Callable[[], tuple[int, int]],
        on_failure: Callable[[], None] = lambda: None,
    ) -> None:
        self.server_id = server_id
        self._on_failure = on_failure
        self._stamp = stamp  # the reader's epoch and the next post's number
        self.url = url.rstrip("/") + PATH
        self._ready = ready
        self._key = key
        self._post_timeout_s = post_timeout_s
        self._lock = threading.Lock()
        self._pokes: dict[str, tuple[str, Audience]] = {}
        self._catch_up = True  # the first post makes it catch up
        self.failing_since: float | None = None  # its first failed post since one landed
        self._waiting = threading.Event()
        self._waiting.set()
        self._stopped = threading.Event()
        for _ in range(SENDERS):
            threading.Thread(target=self._run, name="poke-relay", daemon=True).start()

    def offer(self, tenant_id: str, token: str, audience: Audience = None) -> None:
        with self._lock:  # the newest token, for its audience (others: UNTOLD)
            was = self._pokes.get(tenant_id, (token, audience))
            self._pokes[tenant_id] = coalesced((token, audience), was)
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

    def _take(self) -> tuple[dict[str, tuple[str, Audience]], bool]:
        with self._lock:
            tenants = list(self._pokes)[:POST_TENANTS]
            pokes = {t: self._pokes.pop(t) for t in tenants}
            catch_up, self._catch_up = self._catch_up, False
            if not self._pokes:
                self._waiting.clear()
            return pokes, catch_up

    def _give_back(self, pokes: dict[str, tuple[str, Audience]], catch_up: bool) -> None:
        for tenant_id, (token, audience) in pokes.items():
            self.offer(tenant_id, token, audience)
        if catch_up:
            self.catch_up()

    def _run(self) -> None:
        """One sender: takes what is pending whenever it is free, posts it."""
        backoff = _BACKOFF_S[0]
        # Nothing goes out before the reader has taken its iterators: a catch-up
        # before then would have to be made again (and costs a read unit a tenant).
        while not self._ready.wait(0.5):
            if self._stopped.is_set():
                return
        connection = _Connection(self.url)
        try:
            while not self._stopped.is_set():
                self._waiting.wait()
                if self._stopped.is_set():
                    return
                pokes, catch_up = self._take()
                if not pokes and not catch_up:
                    with self._lock:  # (another sender took them: wait for more)
                        if not self._pokes and not self._catch_up:
                            self._waiting.clear()
                    continue
                body = post_body(pokes, catch_up)
                epoch, seq = self._stamp()
                status, words = connection.post(
                    body,
                    _headers(self._key, self.server_id, epoch, seq, body),
                    CATCH_UP_TIMEOUT_S if catch_up else self._post_timeout_s,
                )
                if status == 204:
                    backoff = _BACKOFF_S[0]
                    self.failing_since = None
                    continue
                self._give_back(pokes, catch_up)
                self.failing_since = self.failing_since or time.monotonic()
                self._on_failure()
                logger.warning(
                    "posting pokes to server %s at %s failed (%s); again in %s s",
                    self.server_id,
                    self.url,
                    _said(status, words),
                    backoff,
                )
                self._stopped.wait(backoff)
                backoff = min(backoff * 2, _BACKOFF_S[1])
        finally:
            connection.close()


class PokeRelay:
    """The reader's side: the followers it posts to, each with its own entries."""

    def __init__(
        self,
        key: bytes,
        epoch: Callable[[], int],
        post_timeout_s: float = POST_TIMEOUT_S,
        on_failure: Callable[[], None] = lambda: None,
    ) -> None:
        self._key = key
        self._on_failure = on_failure
        self._epoch = epoch  # the lease's counter when this server took it
        self._seq = 0  # raised for every post, to whichever follower: never reused
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
                    self._followers[server_id] = self._follower(server_id, url)

    def _follower(self, server_id: str, url: str) -> _Follower:
        ready, failed = self._ready, self._on_failure
        return _Follower(
            server_id, url, self._key, self._post_timeout_s, ready, self._stamp, failed
        )

    def _stamp(self) -> tuple[int, int]:
        with self._lock:
            self._seq += 1
            return self._epoch(), self._seq

    def offer(self, tenant_id: str, token: str, audience: Audience = None) -> None:
        with self._lock:
            followers = list(self._followers.values())
        for follower in followers:
            follower.offer(tenant_id, token, audience)

    def catch_up(self) -> None:
        """Every follower catches up with its next post: the reader has (re)taken its
        iterators and read its own subscribed heads."""
        self._ready.set()
        with self._lock:
            followers = list(self._followers.values())
        for follower in followers:
            follower.catch_up()

    def owed(self) -> tuple[int, float]:
        """Tenants' pokes still to post, and the longest any follower's posts have failed
        (`RelayPending`, `RelayBehindSeconds`: on AWS, FanoutFailures' size and age)."""
        with self._lock:
            followers = list(self._followers.values())
        now = time.monotonic()
        behind = [now - f.failing_since for f in followers if f.failing_since is not None]
        return sum(len(f._pokes) for f in followers), max(behind, default=0.0)

    def stop(self) -> None:
        self.follow({})
