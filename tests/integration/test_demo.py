"""scripts/demo tells its story to the end, with both devices converged."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from api.settings import PROJECT_ROOT
from scripts.local_engine import free_port


@pytest.mark.slow
def test_the_demo_runs_to_convergence() -> None:
    env = {**os.environ, "PORT": str(free_port())}  # nothing there: it starts its own server
    env.pop("DYNAMODB_ENDPOINT", None)
    result = subprocess.run(
        [sys.executable, "-m", "scripts.demo"],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for line in (
        "CONFLICT on the update",
        "The deletion wins",
        "Both devices hold exactly the same data.",
    ):
        assert line in result.stdout
