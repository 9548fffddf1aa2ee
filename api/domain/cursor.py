"""Pagination cursors for `changes`: opaque, signed, bound to one tenant.

A cursor holds the position reached (`after`, the last token returned), the
page set's upper bound (`upper`, the tenant's head when the sync started) and,
for a first sync, `settled`: deletions up to it are left out (their entities'
earlier entries are gone, docs/ordering.md), and the tenant's first token
(`born`, from its head when the sync began): a cursor page of a tenant deleted and
written again since finds another there, and is TENANT_DELETED. A sync that reads
its caller's streams also carries `viewed`: the token of the caller's Member version
its first request's access read reflected (`NO_VERSION`: none); its pages end before
any later version of that record (docs/ordering.md, "A join or a leave between two
pages of a sync"). It is signed with HMAC-SHA256 over the tenant id too, so a cursor
that was edited, made up, or issued for another tenant is rejected.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from dataclasses import dataclass

from api.domain.errors import InvalidCursor
from api.domain.tokens import is_token

# Version 2 adds `born`; cursors of version 1 (without it) are still read. Version 3
# adds `viewed` (only a sync with streams carries it, so it implies them); it is
# written only when there is one, so every other cursor stays one that a server of
# the previous release reads.
_VERSION_3 = "3"
_VERSION = "2"
_VERSION_1 = "1"
_SIG_BYTES = 16


_STREAMS = "s"
# `viewed` of a caller whose access read reflected no version of its Member record (a
# claim tenant's): below every token, so a page ends before any version of it.
NO_VERSION = "0" * 26


@dataclass(frozen=True)
class Position:
    after: str
    upper: str
    settled: str | None = None
    born: str | None = None
    # The tenant had a restricted record when the sync began: its pages read the
    # caller's stream beside the main log (docs/ordering.md, "Who sees what").
    streams: bool = False
    # The token of the caller's Member version the sync's first request's viewer
    # reflected (NO_VERSION: none; None: not known, a cursor of an earlier release or
    # of a sync without streams). Carried with `streams` only.
    viewed: str | None = None


class CursorCodec:
    def __init__(self, secret: str) -> None:
        self._key = secret.encode()

    def _sign(self, tenant_id: str, body: str) -> bytes:
        message = f"{tenant_id}\x00{body}".encode()
        return hmac.new(self._key, message, hashlib.sha256).digest()[:_SIG_BYTES]

    def encode(self, tenant_id: str, position: Position) -> str:
        optional: tuple[str, ...] = (position.settled or "", position.born or "")
        if position.streams and position.viewed is not None:
            body = (_VERSION_3, position.after, position.upper, *optional, position.viewed)
            return self.signed(tenant_id, ".".join(body))
        if position.streams:
            optional += (_STREAMS,)
        return self.signed(
            tenant_id, ".".join((_VERSION, position.after, position.upper, *optional))
        )

    def signed(self, tenant_id: str, body: str) -> str:
        """`body` and its signature for `tenant_id`, as a cursor."""
        raw = body.encode() + self._sign(tenant_id, body)
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    def body(self, tenant_id: str, cursor: str) -> str:
        """What `signed` made the cursor of; InvalidCursor for anything else."""
        try:
            raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
            body, signature = raw[:-_SIG_BYTES].decode("ascii"), raw[-_SIG_BYTES:]
        except (binascii.Error, UnicodeDecodeError, ValueError):
            raise InvalidCursor("cursor is malformed") from None
        if not hmac.compare_digest(signature, self._sign(tenant_id, body)):
            raise InvalidCursor("cursor is not valid for this tenant")
        return body

    def decode(self, tenant_id: str, cursor: str) -> Position:
        parts = self.body(tenant_id, cursor).split(".")
        viewed = None
        streams = len(parts) == 6 and parts[0] == _VERSION and parts[5] == _STREAMS
        if len(parts) == 6 and parts[0] == _VERSION_3:
            streams, viewed, parts = True, parts[5], [_VERSION, *parts[1:5]]
            if not is_token(viewed):
                raise InvalidCursor("cursor is malformed")
        elif streams:
            parts = parts[:5]
        if parts[0] == _VERSION and len(parts) == 5:
            tokens = [part or None for part in parts[1:]]
            if tokens[0] is None or tokens[1] is None:
                raise InvalidCursor("cursor is malformed")
        elif parts[0] == _VERSION_1 and len(parts) in (3, 4):
            tokens = [*parts[1:], None, None][:4]
        else:
            raise InvalidCursor("cursor is malformed")
        if not all(is_token(token) for token in tokens if token is not None):
            raise InvalidCursor("cursor is malformed")
        after, upper, settled, born = tokens
        assert after is not None and upper is not None
        return Position(after, upper, settled, born, streams, viewed)


# A catch-up's cursor (api.service.upgrades): where it reached (a copy's position or
# a log token), what the catch-up was asked (`upTo`, each type's release floor) and
# the tenant's first token; '|' is in no token or floor, but may be in a position's
# entity id (a Member's is its member's `sub`, `auth0|...`): it is read from both ends.
_CATCH_UP = "C"


def _catch_up_body(last: str, up_to: str, asked: str, born: str | None) -> str:
    return "|".join((_CATCH_UP, last, up_to, asked, born or ""))


def encode_catch_up(
    codec: CursorCodec, tenant_id: str, last: str, up_to: str, asked: str, born: str | None
) -> str:
    return codec.signed(tenant_id, _catch_up_body(last, up_to, asked, born))


def decode_catch_up(
    codec: CursorCodec, tenant_id: str, cursor: str, up_to: str, asked: str
) -> tuple[str, str | None]:
    """(where it reached, the tenant's first token) of a catch-up's cursor made for
    the same `upTo` and floors (`asked`); InvalidCursor otherwise."""
    kind, _, rest = codec.body(tenant_id, cursor).partition("|")
    parts = [kind, *rest.rsplit("|", 3)]
    if len(parts) != 5 or parts[0] != _CATCH_UP:
        raise InvalidCursor("cursor is not a catch-up's")
    if parts[2] != up_to or parts[3] != asked:
        raise InvalidCursor("send the same upTo, types and fields with each cursor")
    return parts[1], parts[4] or None
