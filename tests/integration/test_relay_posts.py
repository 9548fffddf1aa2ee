"""The relay's posts under a burst (issue 48, finding 10): a post does not wait for
another's answer (a catch-up held by the follower, a slow post), they go over kept-open
connections, and a follower takes posts that arrive out of order, each once.
In process: the reader's side posting to a recording HTTP server; the follower's
side behind Starlette's test client. Timings are not asserted (scripts/bench's
realtime burst row measures them)."""

from __future__ import annotations

import http.server
import json
import random
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.routing import Route
from starlette.testclient import TestClient

from api.domain.audiences import Audience
from api.realtime import relay
from api.realtime.poke_posts import post_body
from api.realtime.poke_receiver import PokeReceiver
from api.realtime.relay import PATH, WINDOW, PokeRelay, signature

KEY = b"k" * 32
TOKEN = "01M8F7ERXT4VHEJ3QBSJD8PCDC"


class _Recorder(http.server.BaseHTTPRequestHandler):
    """Takes every post (204); holds a catch-up until the test lets it go; answers 503
    while `failing` is set."""

    protocol_version = "HTTP/1.1"  # keeps connections open, as uvicorn does
    posts: list[dict[str, Any]] = []
    connections: set[int] = set()
    release = threading.Event()
    failing = threading.Event()

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        if type(self).failing.is_set():
            self.send_response(503)
            self.send_header("content-length", "0")
            self.end_headers()
            return
        type(self).posts.append(body)
        type(self).connections.add(id(self.connection))
        if body["catchUp"]:
            type(self).release.wait(30)
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def follower() -> Iterator[str]:
    _Recorder.posts, _Recorder.connections = [], set()
    _Recorder.release = threading.Event()
    _Recorder.failing = threading.Event()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        _Recorder.release.set()
        # The senders close their connections as they end; then the handlers end.
        _until(
            lambda: not any(t.name == "poke-relay" for t in threading.enumerate()),
            "the senders ending",
        )
        server.shutdown()
        server.server_close()


def _until(done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 10
    while not done():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def _poked() -> int:
    return sum(len(post["pokes"]) for post in _Recorder.posts)


def test_pokes_are_posted_while_a_catch_up_is_held(follower: str) -> None:
    """The first post asks for a catch-up, which the follower answers only after
    reading its heads (held here): pokes offered meanwhile go in other posts at
    once. Before, the one sender waited for the catch-up's answer (up to 30 s)."""
    poster = PokeRelay(KEY, epoch=lambda: 1)
    poster.follow({"f": follower})
    poster.catch_up()  # the reader has taken its iterators
    try:
        _until(lambda: len(_Recorder.posts) == 1, "the catch-up's post")
        for i in range(20):
            poster.offer(f"tenant{i}", TOKEN)
            time.sleep(0.005)
        _until(lambda: _poked() >= 20, "pokes posted while the catch-up is held")
        assert not _Recorder.release.is_set()
        _Recorder.release.set()
        # Over kept-open connections: at most one a sender, however many posts.
        for i in range(50):
            poster.offer(f"more{i}", TOKEN)
            time.sleep(0.002)
        _until(lambda: _poked() >= 70, "every poke")
        assert len(_Recorder.posts) > 3
        assert len(_Recorder.connections) <= relay.SENDERS, len(_Recorder.connections)
    finally:
        poster.stop()


def test_a_failing_follower_is_behind_and_owed_its_pokes_until_a_post_lands(
    follower: str,
) -> None:
    """What a server's /metrics shows of the relay (RelayPending, RelayBehindSeconds,
    RelayPostFailures; docs/operations.md): while a follower answers 503 its pokes
    are owed and its failing time grows; once a post lands, nothing is owed."""
    _Recorder.release.set()
    _Recorder.failing.set()
    failures: list[int] = []
    poster = PokeRelay(KEY, epoch=lambda: 1, on_failure=lambda: failures.append(1))
    poster.follow({"f": follower})
    poster.catch_up()
    try:
        for i in range(3):
            poster.offer(f"tenant{i}", TOKEN)
        _until(lambda: len(failures) >= 2 and poster.owed()[0] == 3, "failed posts")
        assert poster.owed()[1] > 0
        assert not _Recorder.posts
        _Recorder.failing.clear()
        _until(lambda: _poked() == 3 and poster.owed() == (0, 0.0), "the pokes delivered")
    finally:
        poster.stop()


def _client() -> tuple[TestClient, PokeReceiver, list[tuple[str, str]]]:
    published: list[tuple[str, str]] = []
    receiver = PokeReceiver(
        "me", KEY, lambda t, token, _audience: published.append((t, token)), lambda: None
    )
    app = Starlette(routes=[Route(PATH, receiver.take, methods=["POST"])])
    return TestClient(app), receiver, published


def _post(client: TestClient, epoch: int, seq: int, tenant: str) -> int:
    body = json.dumps({"catchUp": False, "pokes": {tenant: TOKEN}}).encode()
    headers = {
        relay.TO_HEADER: "me",
        relay.EPOCH_HEADER: str(epoch),
        relay.SEQ_HEADER: str(seq),
        relay.SIGNATURE_HEADER: signature(KEY, "me", epoch, seq, body),
    }
    return client.post(PATH, content=body, headers=headers).status_code


def test_posts_arriving_out_of_order_are_each_taken_once() -> None:
    """Posts in flight at once arrive in any order: each is taken (before, every one
    below the highest number taken was refused, 409, and retried after a backoff);
    any of them sent again is refused, as is one of an earlier reader (epoch) or
    below the window of numbers kept."""
    client, receiver, published = _client()
    numbers = list(range(1, 41))
    random.Random(4).shuffle(numbers)
    answers = [_post(client, 2, n, f"t{n}") for n in numbers]
    assert answers == [204] * len(numbers), answers
    assert len(published) == len(numbers)
    replays = [_post(client, 2, n, f"t{n}") for n in numbers]
    assert replays == [409] * len(numbers)
    assert _post(client, 1, 1000, "older-reader") == 409
    assert _post(client, 2, 41 + WINDOW, "far-ahead") == 204
    assert _post(client, 2, 41, "below-the-window") == 409
    assert _post(client, 3, 1, "later-reader") == 204
    assert _post(client, 2, 10_000, "earlier-reader-again") == 409
    assert receiver.refused == len(numbers) + 3


def test_a_posts_audiences_reach_the_followers_hub() -> None:
    """A poke for some members' streams is published for them alone on the follower
    (docs/realtime.md, "Who is poked"); one without, and a post of a server from
    before audiences, for every member; a malformed audience refuses the post."""
    published: list[tuple[str, str, Audience]] = []
    receiver = PokeReceiver(
        "me", KEY, lambda t, token, audience: published.append((t, token, audience)), lambda: None
    )
    client = TestClient(Starlette(routes=[Route(PATH, receiver.take, methods=["POST"])]))

    def post(seq: int, message: dict[str, object]) -> int:
        body = json.dumps(message).encode()
        headers = {
            relay.TO_HEADER: "me",
            relay.EPOCH_HEADER: "2",
            relay.SEQ_HEADER: str(seq),
            relay.SIGNATURE_HEADER: signature(KEY, "me", 2, seq, body),
        }
        return client.post(PATH, content=body, headers=headers).status_code

    pokes = {"t": (TOKEN, frozenset({"m:alice"})), "u": (TOKEN, None)}
    assert post(1, json.loads(post_body(pokes, catch_up=False))) == 204
    assert post(2, {"catchUp": False, "pokes": {"v": TOKEN}}) == 204  # an earlier build's
    assert post(3, {"catchUp": False, "pokes": {"w": TOKEN}, "audiences": {"w": "m:a"}}) == 400
    assert sorted(published) == [
        ("t", TOKEN, frozenset({"m:alice"})),
        ("u", TOKEN, None),
        ("v", TOKEN, None),
    ]
