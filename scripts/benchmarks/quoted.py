"""Figures other pages quote from `scripts/bench`'s run, generated from its saved JSON
(docs/benchmarks/bench.json) through the benchmarks page's machinery (page.Generated):
docs/sync.md's write units of a push, docs/realtime.md's cost per connected device
against AppSync. `scripts/bench` writes them with its own section (`write`);
scripts/check fails when they are stale (scripts/generated.py), each by its own hash
file. `python -m scripts.benchmarks.quoted RUN.json` writes them again.

The realtime figures that are designs the bench does not drive (a socket outside
graphql-ws, a socket's hour before its pokes) are its measured parts priced again
(realtime_cost.Parts, prices.py), never typed.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from scripts.benchmarks.page import DOCS, FOLDER, JSON_NAME, Generated, measured
from scripts.benchmarks.prices import (
    APPSYNC_CONNECTION_MINUTE_USD,
    APPSYNC_REALTIME_UPDATE_USD,
    LAMBDA_ARM64_GB_SECOND_USD,
    LAMBDA_REQUEST_USD,
    READ_UNIT_USD,
    REALTIME_PRICES_AS_OF,
    WEBSOCKET_CONNECTION_MINUTE_USD,
    WEBSOCKET_MESSAGE_USD,
    WRITE_UNIT_USD,
)

SOURCE = f"[{FOLDER}/{JSON_NAME}]({FOLDER}/{JSON_NAME})"


def _begin(name: str) -> str:
    return (
        f"<!-- BEGIN scripts/bench ({name}): generated from benchmarks/bench.json, do not edit -->"
    )


def _end(name: str) -> str:
    return f"<!-- END scripts/bench ({name}) -->"


def _when(saved: dict[str, Any]) -> str:
    return f"{measured('scripts/bench --' + saved['mode'], saved)}, against DynamoDB Local"


def write_units(saved: dict[str, Any]) -> str:
    """A push's write units per update against one update's, history on and off."""
    units = saved["write_units"]
    push, push_off = units["push of 100 updates"], units["push of 100 updates, history off"]
    one, one_off = units["update"], units["update, history off"]
    return "\n".join(
        [
            _begin("write units"),
            "",
            f"{_when(saved)}, DynamoDB's units by AWS's rules (the load does not change "
            f"them; from that run's saved JSON, {SOURCE}): a push of 100 updates costs "
            f"{push['hot'] / 100:.2f} write units per update ({push_off['hot'] / 100:.2f} "
            f"with history off), against {one['hot']:g} for one update alone "
            f"({one_off['hot']:g}), by the server that wrote the tenant's previous "
            f"transaction; by another, which checks that transaction first, "
            f"{push['cold'] / 100:.2f} ({push_off['cold'] / 100:.2f}) against "
            f"{one['cold']:g} ({one_off['cold']:g}).",
            "",
            _end("write units"),
        ]
    )


def realtime(saved: dict[str, Any]) -> str:
    """A connected device-hour by design against AppSync's, and what follows from the
    measured parts: a socket outside graphql-ws, a fan-out's poke, polling."""
    from scripts.benchmarks.realtime_cost import HOUR_MIN, LONGEST_KEEPALIVE_MIN, POKES, Parts

    r = saved["realtime_cost"]
    kinds = r["invocations"]
    parts = Parts(kinds, r["memory_mb"] / 1024, r["subscribe_head_read_units"], 0.0)
    m = 1_000_000
    designs = r["device_hour"]
    appsync = next(iter(designs.values()))["appsync"]
    lines = [
        _begin("realtime"),
        "",
        f"{_when(saved)}, Lambda at {r['memory_mb']} MB. From that run's saved JSON, "
        f"{SOURCE}, its measured parts priced by `scripts/benchmarks/prices.py` "
        f"({REALTIME_PRICES_AS_OF}; {saved['prices']}):",
        "",
        f"| $ per million device-hours ({POKES} pokes) | this API | AppSync | / AppSync |",
        "|---|---|---|---|",
    ]
    for name, c in designs.items():
        lines.append(f"| {name} | {c['total']:.2f} | {appsync:.2f} | {c['total'] / appsync:.2f} |")
    floor = r["socket_floor"]
    lines.append(
        f"| floor of any graphql-ws socket on API Gateway | {floor:.2f} | {appsync:.2f} "
        f"| {floor / appsync:.2f} |"
    )

    # Outside graphql-ws: one $connect doing init's and subscribe's work, its two items
    # and the head's read; each poke a bare message, its share of a fan-out to many
    # devices without claims.
    setup_ms = sum(kinds[k]["billed_ms"] for k in ("$connect", "connection_init", "subscribe"))
    gb = r["memory_mb"] / 1024
    connect = LAMBDA_REQUEST_USD + setup_ms * gb * LAMBDA_ARM64_GB_SECOND_USD / 1000
    items = 2 * WRITE_UNIT_USD + r["subscribe_head_read_units"] * READ_UNIT_USD
    fanned = r["fan_out"]["the poke carries the changes"]
    fan_name = f"fan-out, {fanned['devices']} subscribers"
    unclaimed = Parts({fan_name: {**kinds[fan_name], "write_units": 0.0}}, gb, 0.0, 0.0)
    share = sum(unclaimed.invocations({fan_name: 1.0}).values()) / fanned["devices"]
    minutes = HOUR_MIN * WEBSOCKET_CONNECTION_MINUTE_USD
    outside = minutes + POKES * WEBSOCKET_MESSAGE_USD + connect + items + POKES * share
    lines += [
        "",
        f"Outside graphql-ws (one `$connect` doing init's and subscribe's work, bare "
        f"pokes, no claim): {HOUR_MIN} connection minutes ${minutes * m:.2f}, {POKES} "
        f"messages ${POKES * WEBSOCKET_MESSAGE_USD * m:.2f}, the `$connect` at the "
        f"{setup_ms:.0f} ms its three invocations took ${connect * m:.2f}, its 2 items and "
        f"the head's read ${items * m:.2f}, each poke's share of a fan-out to "
        f"{fanned['devices']:,} "
        f"devices without claims ${share * m:.2f}: ${outside * m:.2f} a million "
        f"device-hours, {outside * m / appsync:.2f}x AppSync's.",
    ]

    # Per poke: the leanest design's hour before its pokes, then each poke's message
    # and its share of a fan-out to many devices, against AppSync's update each.
    leanest_name, leanest = list(designs.items())[-1]
    per_poke_1 = sum(parts.invocations({"fan-out, 1 subscriber": 1.0}).values())
    before = leanest["total"] / m - POKES * (per_poke_1 + WEBSOCKET_MESSAGE_USD)
    poke = fanned["total"] / fanned["devices"] / m
    appsync_poke = APPSYNC_REALTIME_UPDATE_USD
    appsync_before = HOUR_MIN * APPSYNC_CONNECTION_MINUTE_USD + 2 * APPSYNC_REALTIME_UPDATE_USD
    if poke < appsync_poke:
        catch_up = (before - appsync_before) / (appsync_poke - poke)
        after = f"the socket catches up after {catch_up:.0f} pokes a device-hour"
    else:
        after = "the socket never catches up"
    lines += [
        "",
        f"Per poke carrying the changes, fanned out to {fanned['devices']:,} devices: "
        f"${poke * m:.2f} a million against AppSync's ${appsync_poke * m:.2f}. The leanest "
        f'design above ("{leanest_name}", keepAlive {LONGEST_KEEPALIVE_MIN} minutes) '
        f"pays ${before * m:.2f} an hour before its pokes, AppSync "
        f"${appsync_before * m:.2f}: {after}.",
    ]
    p = r["polling"]
    poll = saved["cost"]["operations"]["poll, no changes"]
    lines += [
        "",
        f"Without a socket, polling `changes` costs AppSync's device-hour at one poll every "
        f"{p['par_interval_min']:.1f} minutes, ${p['every_5_min']:.2f} every 5 minutes. "
        f"The shipped socket costs {designs[next(iter(designs))]['total'] / appsync:.1f}x "
        f"AppSync's device-hour, while a poll through the HTTP API, ${poll['total']:.2f} "
        f"a million, is {poll['appsync'] / poll['total']:.1f}x cheaper than AppSync's "
        f"${poll['appsync']:.2f}.",
        "",
        _end("realtime"),
    ]
    return "\n".join(lines)


def _quoting(page: str, name: str, section: Callable[[dict[str, Any]], str]) -> Generated:
    """A page's section quoting the run, its hash file named after it."""
    return Generated(
        page=page,
        json_name=JSON_NAME,
        manifest=f"bench-{name.replace(' ', '-')}.sha256",
        begin=_begin(name),
        end=_end(name),
        section=section,
        module="scripts.benchmarks.quoted",
    )


WRITE_UNITS = _quoting("sync.md", "write units", write_units)
REALTIME = _quoting("realtime.md", "realtime", realtime)
PAGES = (WRITE_UNITS, REALTIME)
PAGE_NAMES = tuple(g.page for g in PAGES)


def write(saved: dict[str, Any], docs: Path = DOCS) -> None:
    """A run of scripts/bench into every page that quotes it."""
    for generated in PAGES:
        generated.write(saved, docs)


def main(argv: list[str] | None = None) -> int:
    for generated in PAGES:
        generated.main(argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
