"""The default convergence run: a few devices, a few hundred operations, fixed seeds."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from api.settings import Settings
from tests.convergence.checker import environment, run_once


@pytest.fixture(scope="module")
def server(settings: Settings) -> Iterator[tuple[str, Any, str]]:
    with environment(settings) as env:
        yield env


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_devices_converge_with_faults(server: tuple[str, Any, str], seed: int) -> None:
    url, ddb, table = server
    run = run_once(seed, devices=4, ops=300, url=url, ddb=ddb, table=table)
    # The run exercised what it claims to: conflicts, crashes and lost responses.
    assert run.stats["acknowledged"] > 50
    assert run.stats["crashes"] > 0
    assert run.stats["transport lost_response"] + run.stats["transport crash"] > 0
