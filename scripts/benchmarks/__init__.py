"""The benchmarks of `scripts/bench`: a small harness (`harness.py`: timing, the
product/raw pairs in alternating rounds, rows, units) and one module per family
of measures (reads, writes, scale, bulk sync, realtime). A new capability adds
its own module and calls it from `scripts/bench.py`."""
