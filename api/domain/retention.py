"""How long a tenant keeps deletions and earlier versions, and what a device that
was away longer must do (contract 3.6, docs/ordering.md "Retention").

A deletion's log entry and every earlier version expire `seconds` after the
write that made them (or replaced them), plus `margin`, through DynamoDB's TTL,
which never deletes an item before its `exp` and may delete it at any time after
(typically within days; maybe never while a test runs). Nothing here depends on
when, or whether, TTL acts: what is past the retention is treated as gone even
while it is still stored, and what is within it is still stored.

The rule for every page of a sync (first page or cursor page): the page must
still deliver every deletion in a range (low, upper] of the log, and each of
them was written after `low_ms` (`Retention.check_kept`). When `low_ms` is older
than `seconds` by the server's clock read after the page's last read returned,
such a deletion may have been removed during that read, and the page is
RESYNC_REQUIRED, whatever it returned. Otherwise every such deletion's `exp` is
more than `margin` after that clock, so TTL had not removed it during the read.
The margin covers a difference between this server's clock and DynamoDB's of up
to an hour (or the whole retention, when that is shorter).
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

    def past(self, written_ms: int, now_ms: int) -> bool:
        """Whether what was written (or replaced) at `written_ms` is past the retention
        at `now_ms` (by this server's clock): it may be gone, and counts as gone."""
        return written_ms < now_ms - self.seconds * 1000

    def gone_before(self, now_ms: int) -> int:
        """The `exp` below which a kept item (a version, a deletion's entry) is past
        the retention at `now_ms`: written or replaced more than `seconds` ago."""
        return now_ms // 1000 + self.margin

    def check_since(self, since: str, now_ms: int) -> None:
        """RESYNC_REQUIRED when deletions after `since` may be gone."""
        self.check_kept(token_ms(since), now_ms)

    def check_kept(self, low_ms: int, now_ms: int, cursor: bool = False) -> None:
        """RESYNC_REQUIRED when a deletion written after `low_ms` may be gone at `now_ms`."""
        if self.past(low_ms, now_ms):
            what = "this sync's cursor continues from a change" if cursor else "since is"
            raise ResyncRequired(
                f"{what} older than the {self.seconds} s this tenant keeps deletions for: "
                "sync again with since: null, drop the entities it does not return, then "
                "push your unsynced edits"
            )

    def outlived(self, token: str, now_ms: int) -> bool:
        """Whether a deletion's log entry written at `token` may already be gone."""
        return self.expires_at(token) < now_ms // 1000
