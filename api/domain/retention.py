"""How long a tenant keeps deletions and earlier versions, and what a device that
was away longer must do (contract 3.6).

A deletion's log entry and every earlier version expire `seconds` after the
write that made them, plus `margin`, through DynamoDB's TTL, which never deletes
an item before its `exp` (it may linger for days after). A sync from a `since`
older than `seconds` is refused with RESYNC_REQUIRED when the tenant has changes
after it (its head is newer), before any change is returned: every deletion
after a `since` it accepts is younger than `seconds`, so still stored. The
margin covers a difference between this server's clock and DynamoDB's of up to
an hour (or the whole retention, when that is shorter).
"""

from __future__ import annotations

from dataclasses import dataclass

from api.domain.errors import ResyncRequired
from api.domain.tokens import token_ms

DEFAULT_RETENTION_S = 90 * 24 * 3600
_MAX_MARGIN_S = 3600


@dataclass(frozen=True)
class Retention:
    seconds: int = DEFAULT_RETENTION_S

    @property
    def margin(self) -> int:
        return min(_MAX_MARGIN_S, self.seconds)

    def expires_at(self, token: str) -> int:
        """When what a write at `token` stops keeping (a deletion's entry, the version
        it replaced) may go: epoch seconds, for DynamoDB's TTL."""
        return token_ms(token) // 1000 + self.seconds + self.margin

    def check_since(self, since: str, now_ms: int) -> None:
        """RESYNC_REQUIRED when deletions after `since` may be gone."""
        if token_ms(since) < now_ms - self.seconds * 1000:
            raise ResyncRequired(
                f"since is older than the {self.seconds} s this tenant keeps deletions for: "
                "sync again with since: null, drop the entities it does not return, then "
                "push your unsynced edits"
            )

    def outlived(self, token: str, now_ms: int) -> bool:
        """Whether a deletion's log entry written at `token` may already be gone."""
        return self.expires_at(token) < now_ms // 1000
