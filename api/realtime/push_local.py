"""Silent pushes from a long-running server (`scripts/serve`, any server process):
each transaction this process commits is handed to a dispatcher thread, which runs
the tenant's push round (`api.service.pushes`) in a small pool and, when a token
waits for a device's window to end, runs the tenant's flush then. Every server
pushes its own writes; the per-device claim in the table keeps to one push per
window whichever server (or round) sends it. Commits never wait for SNS."""

from __future__ import annotations

import contextlib
import heapq
import logging
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from api import metrics
from api.realtime.failures import RepeatedFailures
from api.service.pushes import Pushes

logger = logging.getLogger("api.pushes")

# Tenants waiting for a round at once, at most: past it a commit's round is dropped
# (logged); its devices get the next write's token, or none.
MAX_WAITING = 10_000
# Rounds run at once (each works on its devices at once too): one at a time, a burst
# of 100 writes of 100 tenants waited in line, p99 1.6 s from commit to push.
ROUNDS_AT_ONCE = 8
# A round: the tenant, its token (None: a flush), the writer's device, the audience.
Job = tuple[str, str | None, str | None, frozenset[str] | None]
_WAKE: Job = ("", None, None, None)  # a timer was set: the dispatcher looks again


class LocalPushes:
    def __init__(self, pushes: Pushes, sink: metrics.Metrics | None = None) -> None:
        self._pushes = pushes
        self._sink = sink  # the server's metrics (SilentPushesSent, SilentPushFailures)
        self._work: queue.Queue[Job | None] = queue.Queue(MAX_WAITING)
        self._timers: list[tuple[float, str]] = []  # (monotonic due, tenant), a heap
        self._lock = threading.Lock()  # the timers and the failures, from the rounds
        self._failures = RepeatedFailures(logger, "a push round")
        self._rounds = ThreadPoolExecutor(ROUNDS_AT_ONCE, thread_name_prefix="push-round")
        self._thread = threading.Thread(target=self._run, name="pushes", daemon=True)
        self._thread.start()

    def publish(
        self,
        tenant_id: str,
        token: str,
        device: str | None = None,
        audience: frozenset[str] | None = None,
    ) -> None:
        """A committed transaction of the tenant (`device`: the writer's; `audience`:
        whose view it changed, None: every member's)."""
        try:
            self._work.put_nowait((tenant_id, token, device, audience))
        except queue.Full:
            logger.error("push rounds are behind: the round of %s at %s dropped", tenant_id, token)

    def close(self) -> None:
        self._work.put(None)
        self._thread.join(timeout=2)
        self._rounds.shutdown(wait=False, cancel_futures=True)

    def _run(self) -> None:
        while True:
            with self._lock:
                now = time.monotonic()
                due = self._timers[0][1] if self._timers and self._timers[0][0] <= now else None
                if due is not None:
                    heapq.heappop(self._timers)
                wait = self._timers[0][0] - now if due is None and self._timers else None
            if due is not None:  # a window's end: the tenant's flush
                self._rounds.submit(self._round, due, None, None, None)
                continue
            try:
                job = self._work.get(timeout=None if wait is None else max(0.0, wait))
            except queue.Empty:
                continue
            if job is None:
                return
            if job is not _WAKE:
                self._rounds.submit(self._round, *job)

    def _round(
        self,
        tenant_id: str,
        token: str | None,
        device: str | None,
        audience: frozenset[str] | None,
    ) -> None:
        try:
            if token is None:
                done = self._pushes.flush(tenant_id)
            else:
                done = self._pushes.notify(tenant_id, token, device, audience)
        except Exception as exc:  # any: the loop goes on; a later round retries
            with self._lock:
                self._failures.failed(exc)
            self._later(tenant_id, time.monotonic() + 5.0)
            return
        with self._lock:
            self._failures.worked()
        if self._sink is not None and done.sent:
            self._sink.add(metrics.SILENT_PUSHES, len(done.sent))
        if self._sink is not None and done.failed:
            self._sink.add(metrics.SILENT_PUSH_FAILURES, done.failed)
        if done.due_ms is not None:
            self._later(tenant_id, time.monotonic() + max(0.0, done.due_ms / 1000 - time.time()))

    def _later(self, tenant_id: str, due: float) -> None:
        with self._lock:
            if any(t == tenant_id and d <= due for d, t in self._timers):
                return
            heapq.heappush(self._timers, (due, tenant_id))
        # Full: the dispatcher is busy; it looks at the timers before each job.
        with contextlib.suppress(queue.Full):
            self._work.put_nowait(_WAKE)
