"""Where a request's blocking calls (DynamoDB, S3) run: in worker threads, so that
the event loop serves other requests, and a request's other fields, meanwhile.

Under uvicorn, anyio's pool (Starlette's `run_in_threadpool`): its threads live as
long as the server's main task, and a call is shielded from its request's
cancellation, so a tenant's gate (`api.tenant_gate`) counts it until it ends.

On AWS Lambda, Mangum runs each request in a `run_until_complete` of its own, and
anyio ties its threads to that root task, the request's, stopping them when it
ends: every request started a thread and let it go (1,000 threads for 1,000
polls), some 1.0-1.6 ms of a poll's 8.5-10 ms in the handler, in process
(docs/benchmarks.md, "All in"). `persistent_pool` keeps its threads from one
request to the next instead. Lambda never cancels a request midway (its timeout
ends the whole sandbox), so the shielding is not needed there.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, TypeVar

from starlette.concurrency import run_in_threadpool

_T = TypeVar("_T")

# As many as anyio's pool allows by default: a request's aliases read in parallel.
MAX_WORKERS = 40


class RunBlocking(Protocol):
    """Run `func(*args)` in a worker thread, with the caller's context variables
    (the request's log line counts the capacity its DynamoDB calls consume)."""

    def __call__(self, func: Callable[..., _T], /, *args: Any) -> Awaitable[_T]: ...


def anyio_pool() -> RunBlocking:
    """anyio's pool (a server's): shared by the process, shielded from cancellation."""
    return run_in_threadpool


def persistent_pool(max_workers: int = MAX_WORKERS) -> RunBlocking:
    """A pool of its own whose threads outlive each `run_until_complete` (Lambda's)."""
    pool = ThreadPoolExecutor(max_workers, thread_name_prefix="blocking")

    def run(func: Callable[..., _T], /, *args: Any) -> Awaitable[_T]:
        context = contextvars.copy_context()
        call = functools.partial(context.run, func, *args)
        return asyncio.get_running_loop().run_in_executor(pool, call)

    return run
