"""A server that relays pokes (REALTIME_PEER_URL) refuses to start with a URL the
others cannot post to, or with a cursor secret anyone could sign pokes with."""

from __future__ import annotations

import pytest

from api.settings import Settings

SECRET = "s" * 32


@pytest.mark.parametrize("url", ["server-b", "ftp://10.0.1.7", "http://", "10.0.1.7:8000"])
def test_a_peer_url_that_cannot_be_posted_to_is_refused(url: str) -> None:
    with pytest.raises(ValueError, match="REALTIME_PEER_URL"):
        Settings(realtime_peer_url=url, cursor_secret=SECRET).check()


@pytest.mark.parametrize("secret", [Settings.cursor_secret, "short"])
def test_relaying_needs_a_real_cursor_secret(secret: str) -> None:
    with pytest.raises(ValueError, match="CURSOR_SECRET"):
        Settings(realtime_peer_url="http://10.0.1.7:8000", cursor_secret=secret).check()


def test_a_reachable_url_and_a_real_secret_start() -> None:
    settings = Settings(realtime_peer_url="http://10.0.1.7:8000", cursor_secret=SECRET)
    assert isinstance(settings.check(), list)
    assert isinstance(Settings(cursor_secret="short").check(), list)  # not relaying: fine
