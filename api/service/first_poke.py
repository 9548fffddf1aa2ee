"""A subscription's first event (contract 3.4.1), for its caller: in a tenant with
records not every member sees, only a change in the caller's view pokes it
(docs/realtime.md, "Who is poked"), its first event too."""

from __future__ import annotations

from api.domain.audiences import Audience, catch_up_audience
from api.domain.membership import Viewer
from api.service.ports import Store
from api.service.reading import Reading
from api.service.regroup import moved_after


class FirstPoke:
    def __init__(self, store: Store, reading: Reading) -> None:
        self._store = store
        self._reading = reading

    def latest_seen(self, tenant_id: str, after: str | None, sub: str | None) -> str | None:
        """The newest change token a sync from `after` would reach now, if that sync
        would return a change in `sub`'s view (None: none yet). One Query, as the
        newest change of a tenant is read (`Reading.latest_change`); when there is
        one, a GetItem of the head and, in a tenant with restricted records, a page
        of the caller's changes from `after` (its Query of the log's tail and of
        its stream, a page of one)."""
        latest = self._reading.latest_change(tenant_id, after)
        if latest is None:
            return None
        head = self._store.head(tenant_id)
        if head is None or not head.restricted:
            return latest
        if sub is not None and not isinstance(sub, Viewer):
            # Its groups, as its access item says now (one Query of 1 read unit).
            sub = self._store.access(tenant_id, sub).viewer(sub)
        page = self._reading.changes(tenant_id, since=after, limit=1, sub=sub)
        # Not the tenant's newest token: that one may be of a change outside the view.
        newer = [r.change_token for r in page.items if after is None or r.change_token > after]
        if newer:
            return newer[-1]
        # A re-read of a group joined or left after `after` comes first, and sends
        # entries at or below it (a version held before the join, a LeftView of one):
        # no news to a device at `after`. The join or leave itself is.
        return moved_after(sub, after)

    def catch_up_audience(self, tenant_id: str) -> Audience:
        """Whom a catch-up's poke of the tenant's head is for (`catch_up_audience`):
        one GetItem of the head."""
        head = self._store.head(tenant_id)
        return None if head is None else catch_up_audience(head)
