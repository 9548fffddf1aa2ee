"""Silent pushes' rows (issue "Apps in the background stay current", contract 3.4.2):
a backgrounded device-hour with 10 changes and one write pushed to 1,000 devices
(with and without the syncs they trigger), all in, against AppSync's connected
device-hour and its 1,000 real-time updates; and commit to push published, p50 and
p99, under a burst, beside the writes' own latency in the same run.

The measuring and pricing are scripts/bench_silent_pushes.py's (`fan_out`, `burst`,
`lambda_usd`, `per_push_parts`, called as they are, on the bench's engines: moto's
server serves SNS beside S3), but each push's sync is this run's own all-in
"incremental sync of 10" (`cost.py`'s row, by its parts), not the committed one.
"""

from __future__ import annotations

import dataclasses
from typing import Any
from unittest import mock

from api.settings import Settings
from scripts import bench_silent_pushes as measured
from scripts.benchmarks.prices import (
    APPSYNC_CONNECTION_MINUTE_USD,
    APPSYNC_REALTIME_UPDATE_USD,
    READ_UNIT_USD,
    SNS_MOBILE_PUSH_USD,
    SNS_PUBLISH_REQUEST_USD,
    WRITE_UNIT_USD,
)
from scripts.local_s3 import ensure_push_applications

# Devices of the fan-out, rounds of one device's, and the burst's tenants (one write
# each), by mode (--smoke: the least that runs every row; its figures are not for
# reading: its burst is the script's BURST_TENANTS patched for the call).
SIZES = {
    "smoke": (20, 5, 20),
    "fast": (measured.FAN_OUT, 20, measured.BURST_TENANTS),
    "full": (measured.FAN_OUT, 50, measured.BURST_TENANTS),
}
M = 1_000_000


def measure_silent_pushes(settings: Settings, sync: dict[str, float], mode: str) -> dict[str, Any]:
    """`sync`: this run's all-in incremental sync of 10, $ a million by its parts."""
    devices, rounds, writes = SIZES[mode]
    base = dataclasses.replace(settings, sns_endpoint=settings.s3_endpoint)
    arns = ensure_push_applications(base.sns_client())
    pushing = dataclasses.replace(
        base,
        push_apns_application_arn=arns["APNS"],
        push_fcm_application_arn=arns["FCM"],
        push_devices_per_member=devices + 1,
        push_devices_per_tenant=devices + 1,
    )
    one = measured.fan_out(pushing, 1, rounds=rounds)
    many = measured.fan_out(pushing, devices, rounds=1)
    with mock.patch.object(measured, "BURST_TENANTS", writes):
        timing = measured.burst(pushing)
    return priced(one, many, timing, sync)


def _per_push(round_: dict[str, float]) -> dict[str, float]:
    n = round_["devices"]
    units = round_["read_units"] * READ_UNIT_USD + round_["write_units"] * WRITE_UNIT_USD
    return {
        "sns": SNS_PUBLISH_REQUEST_USD + SNS_MOBILE_PUSH_USD,
        "lambda": measured.lambda_usd(round_["billed_ms"]) / n,
        "dynamodb": units / n,
    }


def priced(
    one: dict[str, float], many: dict[str, float], timing: dict[str, float], sync: dict[str, float]
) -> dict[str, Any]:
    changes, sync_usd = measured.CHANGES_AN_HOUR, sync["total"]
    hour = {k: v * changes for k, v in measured.per_push_parts(one, sync).items()}
    # AppSync's connected hour, as scripts/bench_silent_pushes.py prices it: its
    # connection minutes and (2 + the changes) real-time updates.
    minutes = 60 * APPSYNC_CONNECTION_MINUTE_USD
    appsync_hour = (minutes + (2 + changes) * APPSYNC_REALTIME_UPDATE_USD) * M
    devices = int(many["devices"])
    write = sum(_per_push(many).values()) * devices * M
    appsync_write = APPSYNC_REALTIME_UPDATE_USD * devices * M
    return {
        "changes_an_hour": changes,
        "device_hour": {"parts": hour, "total": sum(hour.values()), "appsync": appsync_hour},
        "fan_out": {
            "devices": devices,
            "total": write,
            "with_syncs": write + sync_usd * devices,
            "appsync": appsync_write,
        },
        "rounds": {"one device": one, f"{devices} devices": many},
        "burst": timing,
        "sync": sync,
    }


def print_silent_pushes(p: dict[str, Any]) -> None:
    hour, fan, burst = p["device_hour"], p["fan_out"], p["burst"]
    print("\nsilent pushes, $ a million, against AppSync (all in)")
    print(f"{'':<58} {'pushes':>9} {'AppSync':>9} {'/ AppSync':>10}")
    rows = (
        (f"backgrounded device-hour, {p['changes_an_hour']} changes, with their syncs", hour),
        (f"one write pushed to {fan['devices']:,} devices", fan),
    )
    for name, row in rows:
        total = row["total"]
        print(f"{name:<58} {total:>9.2f} {row['appsync']:>9.2f} {total / row['appsync']:>10.2f}")
    synced = fan["with_syncs"]
    print(
        f"{'  the same with the syncs it triggers':<58} {synced:>9.2f} "
        f"{fan['appsync']:>9.2f} {synced / fan['appsync']:>10.2f}"
    )
    for name, usd in hour["parts"].items():  # where the device-hour's money goes
        print(f"{'  ' + name:<58} {usd:>9.2f} {'':>9} {usd / hour['appsync']:>10.2f}")
    for name, r in p["rounds"].items():
        print(
            f"  fan-out round, {name}: {r['billed_ms']:.0f} ms billed, {r['read_units']:.1f} RU, "
            f"{r['write_units']:.1f} WU, {r['sent']:.0f} published (median of {r['rounds']:.0f})"
        )
    print(
        f"commit to push published, {burst['pushes']:.0f} pushes of a burst: "
        f"p50 {burst['p50_ms']:.0f} ms, p99 {burst['p99_ms']:.0f} ms; the writes themselves "
        f"(same run) p50 {burst['write_p50_ms']:.0f} ms, p99 {burst['write_p99_ms']:.0f} ms; "
        f"push p99 / write p99 {burst['p99_ms'] / burst['write_p99_ms']:.2f}"
    )
