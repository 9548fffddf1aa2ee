"""Times the test loops (scripts/bench-tests): the fast loop warm, or the whole
suite, with the files that take the longest, from pytest's JUnit report."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(args: list[str], reports: Path) -> tuple[float, int, int, dict[str, float]]:
    """Wall seconds, tests passed, tests not passed, seconds per file."""
    for old in reports.glob("*.xml"):
        old.unlink()
    started = time.perf_counter()
    # scripts/test's own arguments (none: the fast loop), the reports through
    # TEST_REPORT_DIR (one per pytest run: --all makes two), so what is timed is
    # exactly what a developer runs.
    subprocess.run(
        [str(ROOT / "scripts" / "test"), *args],
        cwd=ROOT,
        check=False,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={
            **os.environ,
            "PYTEST_ADDOPTS": "-q -p no:cacheprovider",
            "TEST_REPORT_DIR": str(reports),
        },
    )
    wall = time.perf_counter() - started
    per_file: dict[str, float] = defaultdict(float)
    passed = failed = 0
    for report in sorted(reports.glob("*.xml")):
        for case in ET.parse(report).iter("testcase"):
            name = ".".join(case.get("classname", "?").split(".")[:3])
            per_file[name] += float(case.get("time", 0))
            if case.find("failure") is not None or case.find("error") is not None:
                failed += 1
            elif case.find("skipped") is None:
                passed += 1
    return wall, passed, failed, per_file


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--all", action="store_true", help="time scripts/test --all once")
    parser.add_argument("--top", type=int, default=10, help="how many of the slowest files")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        reports = Path(folder)
        if options.all:
            runs = [("scripts/test --all", ["--all"])]
        else:
            runs = [("scripts/test (cold, not counted)", []), ("scripts/test (warm)", [])]
        rows = [(name, *_run(args, reports)) for name, args in runs]
    load = os.getloadavg()[0]
    print(f"| run | wall s | passed | failed or errors | load at end ({os.cpu_count()} cores) |")
    print("|---|---:|---:|---:|---:|")
    for name, wall, passed, failed, _ in rows:
        print(f"| {name} | {wall:.0f} | {passed} | {failed} | {load:.1f} |")
    per_file = rows[-1][4]
    print("\n| slowest files of the last run | s | share |")
    print("|---|---:|---:|")
    total = sum(per_file.values()) or 1.0
    for name, seconds in sorted(per_file.items(), key=lambda kv: -kv[1])[: options.top]:
        print(f"| {name} | {seconds:.1f} | {seconds / total:.0%} |")
    sys.exit(1 if rows[-1][3] else 0)


if __name__ == "__main__":
    main()
