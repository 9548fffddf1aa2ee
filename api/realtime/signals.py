"""The in-process hub of head changes, and the feed a subscription reads from it.

Writers publish `(tenant, token)` from any thread (the service's commits, the
stream follower); each subscription holds one `Slot` with the newest token not
yet delivered. Publishing overwrites the slot instead of queueing, so a burst of
writes is one event carrying the newest token, and a consumer that reads slowly
or never holds one token's worth of memory.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from api.domain.audiences import UNTOLD, Audience, in_audience, to_check
from api.domain.errors import BadUserInput, TenantDeleted, Unavailable
from api.domain.membership import Roster

# Published in place of a token when a tenant is being deleted: its subscriptions
# end with TENANT_DELETED (it sorts above every token, so it is never overwritten).
# From the table's stream it names the tenant's last token before the deletion,
# `DELETING/<token>` (`deleting`): it then ends only the subscriptions that hold no
# newer token, so a deletion's poke that comes late (or replayed) cannot end the
# subscriptions of the tenant written again since.
DELETING = "~deleting"
_DELETING_OF = re.compile(re.escape(DELETING) + r"(?:/([0-9A-Z]{26}))?")


def deleting(last_token: str | None) -> str:
    """The deletion's mark, naming the tenant's last token before it if known."""
    named = f"{DELETING}/{last_token}"
    return named if last_token is not None and is_deletion(named) else DELETING


def is_deletion(token: str) -> bool:
    return _DELETING_OF.fullmatch(token) is not None


def _deletion_of(token: str) -> tuple[bool, str | None]:
    """Whether `token` is a deletion's mark, and the last token it names (None: any)."""
    named = _DELETING_OF.fullmatch(token)
    return (False, None) if named is None else (True, named.group(1))


class Shares:
    """How many of something each user holds, at most `limit` each. Not locked: its
    owner calls it under its own lock."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._held: dict[str, int] = {}

    def take(self, user: str) -> bool:
        """One more for `user`, if under their limit."""
        held = self._held.get(user, 0)
        if held >= self.limit:
            return False
        self._held[user] = held + 1
        return True

    def give_back(self, user: str) -> None:
        left = self._held.pop(user) - 1
        if left:
            self._held[user] = left


@dataclass(eq=False)
class Slot:
    """One subscription's mailbox: the newest token published and not yet taken."""

    loop: asyncio.AbstractEventLoop
    user: str = ""  # whose subscription (a token's `sub`)
    token: str | None = None
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    # The newest token the subscription holds (its `since`, then each one sent).
    held: str | None = None
    # Whether the waiting token is known to be of a change in its member's view (not
    # a catch-up's, UNTOLD), and whether the token taken last was.
    told: bool = True
    taken_told: bool = True
    # The audience of a waiting token not known to be in the view (UNTOLD when it
    # replaced another waiting token: which of them is in the view is read), and of
    # the one taken last.
    audience: Audience = None
    taken_audience: Audience = None

    def offer(self, token: str, audience: Audience = None) -> None:
        """On the slot's event loop: keep `token` if it is newer than what waits and
        this subscription's member is in its `audience` (a change outside its view
        pokes it not; an UNTOLD one, or one naming a group, is kept, to check: its
        member's groups are not known here). A deletion naming a last
        token older than the one this subscription holds is about an earlier life
        of the tenant: it is ignored."""
        mine = in_audience(self.user, audience)
        if not mine and not to_check(audience):
            return
        deletion, last = _deletion_of(token)
        if deletion and last is not None and self.held is not None and self.held > last:
            return
        if self.token is None or token > self.token:
            replaced = self.token is not None
            self.token = token
            self.told = mine
            self.audience = UNTOLD if replaced and not mine else audience
            self.ready.set()

    async def take(self) -> str:
        await self.ready.wait()
        if self.token is not None and is_deletion(self.token):
            raise TenantDeleted("this tenant was deleted")
        self.ready.clear()
        token, self.token = self.token, None
        self.taken_told, self.told = self.told, True
        self.taken_audience, self.audience = self.audience, None
        assert token is not None
        return token


class TenantSignals:
    """Subscriptions by tenant, at most `capacity` in this process and `per_user` of
    one user."""

    def __init__(self, capacity: int, per_user: int | None = None) -> None:
        self.capacity = capacity
        self._by_user = Shares(capacity if per_user is None else per_user)
        self._slots: dict[str, set[Slot]] = {}
        self._count = 0
        self._lock = threading.Lock()
        self._on_first: list[Callable[[], None]] = []

    def on_first_subscription(self, callback: Callable[[], None]) -> None:
        """Call `callback` when the first subscription registers (starts the stream
        follower lazily: a process nobody subscribes to reads no stream)."""
        self._on_first.append(callback)

    def register(self, tenant_id: str, user: str = "") -> Slot:
        slot = Slot(asyncio.get_running_loop(), user=user)
        with self._lock:
            if not self._by_user.take(user):
                raise BadUserInput(
                    f"at most {self._by_user.limit} subscriptions of one user on one server"
                )
            if self._count >= self.capacity:
                self._by_user.give_back(user)
                raise Unavailable(
                    f"this server holds its maximum of {self.capacity} subscriptions; retry later"
                )
            self._slots.setdefault(tenant_id, set()).add(slot)
            self._count += 1
            first, self._on_first = self._on_first, []
        for callback in first:
            callback()
        return slot

    def unregister(self, tenant_id: str, slot: Slot) -> None:
        with self._lock:
            slots = self._slots.get(tenant_id)
            if slots is not None and slot in slots:
                slots.discard(slot)
                self._count -= 1
                self._by_user.give_back(slot.user)
                if not slots:
                    del self._slots[tenant_id]

    def tenants(self) -> frozenset[str]:
        """The tenants with a live subscription in this process."""
        with self._lock:
            return frozenset(self._slots)

    def publish(self, tenant_id: str, token: str, audience: Audience = None) -> None:
        """From any thread: wake the tenant's subscriptions with `token`, those of its
        `audience`'s members only (None: all)."""
        with self._lock:
            slots = list(self._slots.get(tenant_id, ()))
        for slot in slots:
            try:
                slot.loop.call_soon_threadsafe(slot.offer, token, audience)
            except RuntimeError:  # that loop is closed: its subscription is gone
                self.unregister(tenant_id, slot)


class LiveFeed:
    """`ChangeFeed` of a long-running server: the first token from the table, then
    what the hub publishes, each strictly newer than the last one delivered."""

    def __init__(
        self,
        signals: TenantSignals,
        first_bound: Callable[[str, str | None, str], Awaitable[str | None]],
        on_poke: Callable[[str], None] | None = None,
        roster: Callable[[str, str], Awaitable[Roster]] | None = None,
    ) -> None:
        self._signals = signals
        # The tenant's roster as read after a token committed (read once per tenant
        # and token in the process, as each event's check of membership reads it):
        # who is in the groups a change names (None: each member's view is read).
        self._roster = roster
        self._on_poke = on_poke  # each token yielded after the first (`api.metrics`)
        # The newest complete change newer than `after` in the view of the caller
        # (`user`), or None: a read of the tenant, in the app's runner (`api.app`).
        self._first_bound = first_bound

    async def changes(
        self, tenant_id: str, after: str | None, user: str = ""
    ) -> AsyncIterator[str]:
        # Register before reading the table: a write committed in between is then
        # published to this slot, so nothing slips between the read and the wait.
        slot = self._signals.register(tenant_id, user)
        slot.held = after
        try:
            first = await self._first_bound(tenant_id, after, user)
            if first is not None:
                slot.held = first
                yield first
            last = first or after
            while True:
                token = await slot.take()
                audience = slot.taken_audience
                if not slot.taken_told and (last is None or token > last):
                    if self._roster is not None and not to_check(audience, groups_known=True):
                        # A change of a group's records: sent if the member is in one
                        # of its groups by the roster read after it committed.
                        access = (await self._roster(tenant_id, token)).access(user)
                        if not in_audience(access.viewer(user), audience):
                            continue
                    else:
                        # A catch-up's token: sent only if the member's view changed
                        # since the last one sent (one read), as that change's token.
                        seen = await self._first_bound(tenant_id, last, user)
                        if seen is None:
                            continue
                        token = seen
                if last is None or token > last:
                    last = slot.held = token
                    if self._on_poke is not None:
                        self._on_poke(token)
                    yield token
        finally:
            self._signals.unregister(tenant_id, slot)
