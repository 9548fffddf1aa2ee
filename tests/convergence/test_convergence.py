"""The default convergence run: a few devices, a few hundred operations, fixed seeds."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from api.settings import Settings
from tests.convergence.checker import environment, run_once


@pytest.fixture(scope="module", params=["atomic", "torn"])
def server(
    settings: Settings, request: pytest.FixtureRequest
) -> Iterator[tuple[list[str], Any, str]]:
    """One server on DynamoDB Local, or two through the torn-commit engine."""
    if request.param == "atomic":
        with environment(settings) as env:
            yield env
    else:
        with environment(settings, servers=2, torn_seed=1) as env:
            yield env


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_devices_converge_with_faults(server: tuple[list[str], Any, str], seed: int) -> None:
    urls, ddb, table = server
    run = run_once(seed, devices=4, ops=300, urls=urls, ddb=ddb, table=table)
    # The run exercised what it claims to: conflicts, crashes and lost responses.
    assert run.stats["acknowledged"] > 50
    assert run.stats["crashes"] > 0
    assert run.stats["transport lost_response"] + run.stats["transport crash"] > 0
