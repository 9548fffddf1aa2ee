"""A tenant's deletion between its calls (contract 3.8): the mark a call took part in,
what the last call ended, and what the tenant written again must still count of the
uploads its deleted life presigned (docs/attachments.md, "Deleting a tenant").
Plain Python, no DynamoDB."""

from __future__ import annotations

from dataclasses import dataclass

from api.domain.attachments import UPLOAD_LINK_S

# An upload link may be sent until UPLOAD_LINK_S after it was signed, and S3 checks
# the expiry when a request begins ("Sharing objects with presigned URLs", S3 User
# Guide): a PUT begun just before may end later. At most 10 MiB (MAX_BLOB_BYTES),
# it ends within minutes unless the client stalls on purpose, and S3 drops a
# connection idle for some 20 s (RequestTimeout). An hour is the margin, as for
# the sweep's marks (`api.service.blob_sweep.MARK_S`): AWS documents no bound.
LANDING_MARGIN_S = 3600


class DeletionOver(Exception):
    """The deletion a call took part in was ended by another call meanwhile: this call
    has nothing left to do, and must touch nothing (the tenant may be written, or
    being deleted, again)."""


@dataclass(frozen=True)
class DeletionMark:
    """A deletion as one call read its mark: the same random id on the tenant's head
    and on its blob usage item from the first call to the last, and how many items
    were removed when the call read it. Every removal and rewrite the call makes is
    conditioned on this id, so a call that runs late touches nothing of a later
    deletion, or of the tenant written again."""

    id: str
    removed: int = 0


@dataclass(frozen=True)
class DeletionEnd:
    """What the call that ended a deletion read off its mark: who asked, when (epoch
    ms), and how many items the deletion removed (the head included)."""

    asked_by: str
    asked_at_ms: int
    removed: int


@dataclass(frozen=True)
class LinkWindow:
    """Bytes reserved by uploads whose links may still be used, and until when (epoch
    s) the last of them may land (0: none)."""

    bytes: int = 0
    until: int = 0

    def at(self, now_s: int) -> LinkWindow:
        """This window as of `now_s`: empty once every upload it counts has landed."""
        return self if self.until > now_s else LinkWindow()

    def plus(self, other: LinkWindow) -> LinkWindow:
        if not other.bytes:
            return self
        if not self.bytes:
            return other
        return LinkWindow(self.bytes + other.bytes, max(self.until, other.until))


def links_of_reservations(reserved: int, last_link_expires: int) -> LinkWindow:
    """The uploads a generation's reservations may still land: `reserved` bytes since
    the window of its links opened (`api.storage.blob_usage`), the last of whose links
    expires at `last_link_expires` (epoch s)."""
    if not reserved:
        return LinkWindow()
    return LinkWindow(reserved, last_link_expires + LANDING_MARGIN_S)


def link_expiry(reserved_at_s: int) -> int:
    """When a link signed at `reserved_at_s` stops being accepted (epoch s)."""
    return reserved_at_s + UPLOAD_LINK_S
