"""Who each transaction this process commits is for, handed to realtime with its
token (`on_commit`): the members whose view it changed (docs/realtime.md, "Who is
poked"), so a process's own commit pokes only them, at once.

The writer hands `on_commit` a token alone; what its transaction wrote where is in
the writes it gave the store. So the store is wrapped (`tapped`): each `commit`
call records, for its thread, the tenant, the transaction's last token and its
audience, which `audience` returns for that token (the writer calls `on_commit` on
the thread that committed, once the commit returned).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, cast

from api.domain.audiences import Audience, of_principals
from api.domain.mutations import Write
from api.service.ports import Store


def audience_of(writes: Sequence[Write]) -> Audience:
    """Whose view a transaction of `writes` changed: every member's when one of them
    puts a main log entry (a tenant-wide version, or the sentinel of a record leaving
    the tenant's view), else the principals of the streams they put entries in."""
    principals: set[str] = set()
    for write in writes:
        if write.entries.main is not None:
            return None
        principals.update(write.entries.streams)
    return of_principals(principals)


class CommitAudiences:
    def __init__(self) -> None:
        self._last = threading.local()

    def tapped(self, store: Store) -> Store:
        """`store`, whose commits this records the audience of."""
        return cast(Store, _Tapped(store, self))

    def sent(self, tenant_id: str, writes: Sequence[Write]) -> None:
        self._last.commit = (tenant_id, writes[-1].record.change_token, audience_of(writes))

    def audience(self, tenant_id: str, token: str) -> Audience:
        """The audience of the transaction this thread committed last, if it is the one
        of `token`; else None (every member: a commit this did not see)."""
        last = getattr(self._last, "commit", None)
        if last is None or last[:2] != (tenant_id, token):
            return None
        return cast(Audience, last[2])

    def telling(
        self, on_commit: Callable[[str, str, Audience], None]
    ) -> Callable[[str, str], None]:
        """The writer's `on_commit(tenant, token)`, calling `on_commit` with the
        transaction's audience too."""

        def told(tenant_id: str, token: str) -> None:
            on_commit(tenant_id, token, self.audience(tenant_id, token))

        return told


class _Tapped:
    """A store whose `commit` calls are recorded first; the rest is the store's."""

    def __init__(self, store: Store, audiences: CommitAudiences) -> None:
        self._store = store
        self._audiences = audiences

    def commit(self, tenant_id: str, writes: Sequence[Write], *args: Any, **kwargs: Any) -> None:
        self._audiences.sent(tenant_id, writes)
        self._store.commit(tenant_id, writes, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)
