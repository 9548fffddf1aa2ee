"""Where a server's metrics beyond a request's come from (docs/operations.md): a
tenant's gate refusing a call (`TenantThrottled`), and the sweep's round written for
node_exporter's textfile collector (`scripts/sweep --metrics-file`), read back with
prometheus-client's own parser."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from api import metrics, request_log
from api.domain.errors import Unavailable
from api.prometheus_metrics import write_sweep_textfile
from api.tenant_gate import TenantGate
from tests.support.prometheus_text import samples_of_file


def test_a_call_the_gate_refuses_is_counted_as_the_tenant_throttled() -> None:
    async def run() -> request_log.RequestLog:
        gate = TenantGate(slots=1, max_waiting=0)
        log, reset = request_log.start("r1")
        try:
            async with gate.enter("t1"):
                with pytest.raises(Unavailable):
                    async with gate.enter("t1"):
                        pass
                async with TenantGate(slots=1, max_waiting=0).enter("t2"):
                    pass  # another tenant's gate admits it
        finally:
            request_log.finish(reset)
        return log

    log = asyncio.run(run())
    assert log.throttled == 1
    log.codes.append("UNAVAILABLE")
    values = {m.name: v for m, v, _ in metrics.request_values(log, 200, 1.0)}
    assert values[metrics.TENANT_THROTTLED.name] == 1
    assert values[metrics.UNAVAILABLE.name] == 1


def test_the_sweep_file_counts_rounds_on_and_keeps_the_last_success(tmp_path: Path) -> None:
    path = tmp_path / "sweep.prom"
    write_sweep_textfile(str(path), calls=3, failed=False, now_s=1000.0)
    write_sweep_textfile(str(path), calls=0, failed=True, now_s=2000.0)
    write_sweep_textfile(str(path), calls=2, failed=False, now_s=3000.0)
    write_sweep_textfile(str(path), calls=0, failed=True, now_s=4000.0)
    assert samples_of_file(path) == {
        "sync_sweep_calls_total": 5,
        "sync_sweep_failures_total": 2,
        "sync_sweep_last_success_timestamp_seconds": 3000.0,
    }
    assert [p.name for p in tmp_path.iterdir()] == ["sweep.prom"]  # no file left aside
