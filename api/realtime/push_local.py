"""Silent pushes from a long-running server (`scripts/serve`, any server process):
each transaction this process commits is handed to one worker thread, which runs
the tenant's push round (`api.service.pushes`) and, when a token waits for a
device's window to end, runs the tenant's flush then. Every server pushes its own
writes; the per-device claim in the table keeps to one push per window whichever
server sends it. Commits never wait for SNS."""

from __future__ import annotations

import heapq
import logging
import queue
import threading
import time

from api.realtime.failures import RepeatedFailures
from api.service.pushes import Pushes

logger = logging.getLogger("api.pushes")

# Tenants waiting for a round at once, at most: past it a commit's round is dropped
# (logged); its devices get the next write's token, or none.
MAX_WAITING = 10_000


class LocalPushes:
    def __init__(self, pushes: Pushes) -> None:
        self._pushes = pushes
        self._work: queue.Queue[tuple[str, str | None, str | None] | None] = queue.Queue(
            MAX_WAITING
        )
        self._timers: list[tuple[float, str]] = []  # (monotonic due, tenant), a heap
        self._failures = RepeatedFailures(logger, "a push round")
        self._thread = threading.Thread(target=self._run, name="pushes", daemon=True)
        self._thread.start()

    def publish(self, tenant_id: str, token: str, device: str | None = None) -> None:
        """A committed transaction of the tenant (`device`: the writer's)."""
        try:
            self._work.put_nowait((tenant_id, token, device))
        except queue.Full:
            logger.error("push rounds are behind: the round of %s at %s dropped", tenant_id, token)

    def close(self) -> None:
        self._work.put(None)
        self._thread.join(timeout=2)

    def _run(self) -> None:
        while True:
            job: tuple[str, str | None, str | None] | None
            if self._timers and self._timers[0][0] <= time.monotonic():
                job = (heapq.heappop(self._timers)[1], None, None)  # a window's end
            else:
                timeout = None
                if self._timers:
                    timeout = max(0.0, self._timers[0][0] - time.monotonic())
                try:
                    job = self._work.get(timeout=timeout)
                except queue.Empty:
                    continue
            if job is None:
                return
            tenant_id, token, device = job
            try:
                if token is None:
                    done = self._pushes.flush(tenant_id)
                else:
                    done = self._pushes.notify(tenant_id, token, device)
            except Exception as exc:  # any: the loop goes on; a later round retries
                self._failures.failed(exc)
                heapq.heappush(self._timers, (time.monotonic() + 5.0, tenant_id))
                continue
            self._failures.worked()
            if done.due_ms is not None:
                wait = max(0.0, done.due_ms / 1000 - time.time())
                due = time.monotonic() + wait
                if not any(t == tenant_id and d <= due for d, t in self._timers):
                    heapq.heappush(self._timers, (due, tenant_id))
