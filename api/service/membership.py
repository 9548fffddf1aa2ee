"""Membership as data (contract 6): what a tenant's access items say of a caller,
read once per tenant and request; and its roster, read once per tenant and change
for realtime, whose subscribers are checked again at each event they would get."""

from __future__ import annotations

import threading
from collections import OrderedDict
from concurrent.futures import Future

from api.domain.identifiers import check_identifier
from api.domain.membership import Access, Roster
from api.service.ports import Store

# Rosters kept per process, one per tenant (its latest change's): a server's
# subscribers of one tenant share one read per change.
ROSTERS = 1024


class Membership:
    def __init__(self, store: Store) -> None:
        self._store = store
        self._rosters: OrderedDict[str, tuple[str, Future[Roster]]] = OrderedDict()
        self._lock = threading.Lock()
        self.roster_reads = 0  # Queries of whole rosters so far (tests count them)

    def access(self, tenant_id: str, sub: str) -> Access:
        """One consistent Query of 1 read unit (`api.storage.members.access`)."""
        check_identifier(tenant_id, "tenantID")
        return self._store.access(tenant_id, sub)

    def roster_at(self, tenant_id: str, token: str) -> Roster:
        """The tenant's members as read after its change `token` was committed (a
        blocking call): see `roster_of`."""
        future, mine = self.roster_of(tenant_id, token)
        if mine:
            self.read_roster(tenant_id, future)
        return future.result()

    def roster_of(self, tenant_id: str, token: str) -> tuple[Future[Roster], bool]:
        """Where the tenant's members as read after its change `token` arrive: read
        once per tenant and token in this process, whoever asks (a subscriber being
        told of `token`, or of a later one: a later token reads again). True: the
        caller is the first to ask, and reads it (`read_roster`), in a worker thread;
        the others wait for the future without taking one. Never blocks."""
        with self._lock:
            held = self._rosters.get(tenant_id)
            if held is not None and held[0] >= token:
                self._rosters.move_to_end(tenant_id)
                return held[1], False
            future: Future[Roster] = Future()
            self._rosters[tenant_id] = (token, future)
            if len(self._rosters) > ROSTERS:
                self._rosters.popitem(last=False)
            return future, True

    def read_roster(self, tenant_id: str, future: Future[Roster]) -> None:
        """One Query of the tenant's access items, into `future` (a failure too: the
        waiting subscribers see it; the next change reads again)."""
        try:
            self.roster_reads += 1
            future.set_result(self._store.roster(tenant_id))
        except Exception as exc:
            self.abandon(tenant_id, future, exc)

    def abandon(self, tenant_id: str, future: Future[Roster], why: Exception) -> None:
        """`future` will not be read (it failed, or its reader was cancelled before it
        ran): its waiters get `why`, and the next asks again."""
        with self._lock:
            held = self._rosters.get(tenant_id)
            if held is not None and held[1] is future:
                del self._rosters[tenant_id]
        if not future.done():
            future.set_exception(why)
