"""`scripts/sweep`: one round of the sweep of unreferenced blobs
(`api.service.blob_sweep`), as the hourly function runs it on AWS, against the
engines `scripts/serve` started (or DYNAMODB_ENDPOINT and S3_ENDPOINT).

    scripts/sweep                        # every tenant whose pass is due
    scripts/sweep --tenant family1       # one whole pass of one tenant, due or not
    scripts/sweep --tenant family1 --ahead-days 8   # as if 8 days later: blobs
                                         # uploaded now are past the 7-day grace

A blob found unreferenced is marked by one pass and deleted by a pass at least an
hour (MARK_S) later: run the second with --ahead-days larger by 0.05 or more.

On a server, cron runs it hourly (docs/operations.md); with --metrics-file PATH
each round writes its metrics (calls, failures, the last success) for
node_exporter's textfile collector, which prometheus-alerts.yml's sweep rules read."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
import time

from api.settings import Settings
from api.sweep_handler import build


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/sweep", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tenant", help="sweep this tenant only, a whole pass")
    parser.add_argument(
        "--ahead-days", type=float, default=0.0, help="run as if this many days later"
    )
    parser.add_argument(
        "--metrics-file",
        help="write the round's metrics here (Prometheus text format, node_exporter's "
        "textfile collector)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    settings = Settings.from_env()
    if settings.dynamodb_endpoint is None:
        endpoint = f"http://127.0.0.1:{settings.dynamodb_local_port}"
        settings = dataclasses.replace(settings, dynamodb_endpoint=endpoint)
    if settings.s3_endpoint is None:
        settings = dataclasses.replace(
            settings, s3_endpoint=f"http://127.0.0.1:{settings.s3_local_port}"
        )
    ahead = args.ahead_days * 86400
    sweep = build(settings, clock_s=lambda: time.time() + ahead)
    print(f"==> sweeping blobs: table {settings.table_name}, bucket {settings.blob_bucket}")
    if args.tenant:
        for _ in range(1000):
            call = sweep.sweep(args.tenant)
            print(f"    {call}")
            if call.done:
                break
        return 0
    calls, failed = 0, True
    try:
        calls = sweep.sweep_due(budget_s=240)
        failed = False
    finally:
        if args.metrics_file:
            from api.prometheus_metrics import write_sweep_textfile

            write_sweep_textfile(args.metrics_file, calls, failed, time.time())
    print(f"==> {calls} calls")
    return 0


if __name__ == "__main__":
    sys.exit(main())
