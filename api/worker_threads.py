"""Where a request's blocking calls (DynamoDB, S3) run: in worker threads, so that
the event loop serves other requests, and a request's other fields, meanwhile.

One runner (`Runner`) for both pools, so that what a call holds is held until the
call in the thread returns, whatever cancels the task awaiting it. graphql-core
cancels a request's other root fields when a non-null one fails, and a
graphql-transport-ws `complete` cancels an operation: a thread cannot be stopped,
so the call went on while its awaiting task ended at once, giving back the tenant's
gate slot (`api.tenant_gate`) and anyio's limiter token, and its calls were on no
request's log line. One client, one request at a time, held 175 Queries of one
tenant in flight (the gate's bound: 4) and 182 threads (issue 48). Now a cancelled
call's task waits for the thread before it raises CancelledError (so a gate held
around the call is held until then), and the call is tracked on its request's log
(`api.request_log`), whose line waits for it (`settle`).

The pools:

- `anyio_pool`, a server's (uvicorn): Starlette's `run_in_threadpool`, whose
  threads live as long as the server's main task. anyio's shielded scope does not
  stop asyncio's own `Task.cancel()` (a cancelled call returned after 0.1 s while
  its thread ran 1 s); the runner awaits it in a task of its own that nothing
  cancels, so anyio keeps its limiter token until the thread returns.
- `persistent_pool`, AWS Lambda's: Mangum runs each request in a
  `run_until_complete` of its own, and anyio ties its threads to that root task,
  the request's, stopping them when it ends: every request started a thread and
  let it go (1,000 threads for 1,000 polls), some 1.0-1.6 ms of a poll's
  8.5-10 ms in the handler, in process (measured: commit 896afed). This pool
  keeps its threads from one request to the next instead. A request's invocation
  ends once its calls have returned (the log line waits for them): none of its
  threads runs on into the next invocation of the sandbox.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, TypeVar

from starlette.concurrency import run_in_threadpool

from api import request_log

_T = TypeVar("_T")

# As many as anyio's pool allows by default: a request's aliases read in parallel.
MAX_WORKERS = 40


class RunBlocking(Protocol):
    """Run `func(*args)` in a worker thread, with the caller's context variables
    (the request's log line counts the capacity its DynamoDB calls consume).
    Returns, or raises (CancelledError too), only once the call has returned."""

    def __call__(self, func: Callable[..., _T], /, *args: Any) -> Awaitable[_T]: ...


# Starts `call` in a thread of a pool; its result when it returns.
Start = Callable[[Callable[[], Any]], Awaitable[Any]]


class Runner:
    """The one runner of blocking calls, over the pool `start` starts them in."""

    def __init__(self, start: Start) -> None:
        self._start = start

    async def __call__(self, func: Callable[..., _T], /, *args: Any) -> _T:
        # In a future of its own that nothing cancels: the pool's own bookkeeping
        # (anyio's limiter token) lasts as long as the thread's call.
        call: asyncio.Future[_T] = asyncio.ensure_future(
            self._start(functools.partial(func, *args))
        )
        log = request_log.current()
        if log is not None:
            log.track(call)
        await outlast(call)
        return call.result()


async def outlast(*futures: asyncio.Future[Any]) -> None:
    """Wait until every one of `futures` is done, though the awaiting task be
    cancelled meanwhile; then raise its CancelledError, if it was (the futures
    themselves are never cancelled: a thread's call cannot be stopped)."""
    cancelled: asyncio.CancelledError | None = None
    pending = {f for f in futures if not f.done()}
    while pending:
        try:
            _, pending = await asyncio.wait(pending)
        except asyncio.CancelledError as exc:  # asyncio.wait leaves the futures alone
            cancelled = exc
            pending = {f for f in pending if not f.done()}
    if cancelled is not None:
        raise cancelled


async def settle(log: request_log.RequestLog) -> None:
    """Once no call of the request is running (its line then counts them all)."""
    # A call done a moment ago leaves the set at the loop's next step (its
    # callback): only those not done are waited for, or this would spin.
    while running := [f for f in log.outliving if not f.done()]:
        await outlast(*running)


def anyio_pool() -> RunBlocking:
    """anyio's pool (a server's): shared by the process."""
    return Runner(run_in_threadpool)


def persistent_pool(max_workers: int = MAX_WORKERS) -> RunBlocking:
    """A pool of its own whose threads outlive each `run_until_complete` (Lambda's)."""
    pool = ThreadPoolExecutor(max_workers, thread_name_prefix="blocking")

    def start(call: Callable[[], Any]) -> Awaitable[Any]:
        context = contextvars.copy_context()
        return asyncio.get_running_loop().run_in_executor(pool, context.run, call)

    return Runner(start)
