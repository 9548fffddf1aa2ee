"""The default convergence run: a few devices, a few hundred operations, fixed seeds."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from api.settings import Settings
from tests.convergence.checker import ATTACH_RATE, ENGINES, STORE_FAULTS, environment, run_once

pytestmark = pytest.mark.serial  # scripts/test --all runs it alone (pyproject.toml)

# Seconds the "horizon" servers keep deletions: a run lasts several times longer,
# so devices left offline cross it and resync.
HORIZON_S = 2


@pytest.fixture(scope="module", params=["atomic", "torn", "horizon", "faults"])
def server(
    settings: Settings, request: pytest.FixtureRequest
) -> Iterator[tuple[list[str], Any, str]]:
    """One server on DynamoDB Local, two through the torn-commit engine, or one that
    keeps deletions for HORIZON_S only."""
    if request.param == "atomic":
        with environment(settings) as env:
            yield env
    elif request.param == "torn":
        with environment(settings, servers=2, torn_seed=1) as env:
            yield env
    elif request.param == "faults":
        with environment(settings, servers=2, torn_seed=2, faults=STORE_FAULTS) as env:
            yield env
    else:
        with environment(settings, retention_s=HORIZON_S) as env:
            yield env


# Two seeds per server in CI, of OPS operations by 4 devices (12 runs of 300 took
# 124 s of its serial part); `scripts/converge` runs as many and as long as asked.
OPS = 200


@pytest.mark.parametrize("seed", [1, 3])
def test_devices_converge_with_faults(
    server: tuple[list[str], Any, str], seed: int, request: pytest.FixtureRequest
) -> None:
    urls, ddb, table = server
    horizon = request.node.callspec.params["server"] == "horizon"
    away = HORIZON_S + 1 if horizon else 0
    # Attachments in one seed per server: each write that sets one costs a blob check,
    # and CI's time is short (scripts/converge has them in every seed). The last seed:
    # the first ones draw exactly what they drew before attachments, so the store
    # faults counted below (over the module's runs so far) have been injected.
    attach_rate = ATTACH_RATE if seed == 3 else 0
    run = run_once(seed, 4, OPS, urls, ddb, table, away_s=away, attach_rate=attach_rate)
    if horizon:
        assert run.stats["resyncs"] > 0, run.stats
    if request.node.callspec.params["server"] == "faults":
        injected = ENGINES[-1].stats
        assert injected.lost_after_apply and injected.throttled and injected.server_errors
        # Whatever the store did, each answer was honest and coded: never a 500.
        assert run.stats["transport code INTERNAL_SERVER_ERROR"] == 0, run.stats
        assert run.stats["transport server error"] == 0, run.stats
    # The run exercised what it claims to: conflicts, crashes and lost responses.
    assert run.stats["acknowledged"] > 50
    assert run.stats["crashes"] > 0
    assert run.stats["transport lost_response"] + run.stats["transport crash"] > 0
    if attach_rate:
        # Entities ended up referencing blobs attached offline, each downloaded right.
        assert run.stats["blobs referenced"] > 0 and run.stats["transport blob put"] > 0
