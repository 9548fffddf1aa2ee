"""`scripts/bench --smoke` (`--fast`'s every row with the fewest calls) runs and produces
a well-formed table (timings are not asserted), and writes the benchmarks page's
generated section and its plots, and the figures other pages quote, from that run's
JSON, into its own folder."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

from api.service.tenancy import ITEMS_PER_CALL
from api.settings import PROJECT_ROOT
from scripts.bench import SMOKE_BULK
from scripts.bench_silent_pushes import per_push_parts
from scripts.benchmarks import datastore, page, quoted
from scripts.benchmarks.cost import ROWS as COST_ROWS
from scripts.benchmarks.cost import shipped_lambda
from scripts.benchmarks.realtime import SIZES as REALTIME_SIZES
from scripts.benchmarks.realtime_burst import GROUPS as BURST_GROUPS
from scripts.benchmarks.realtime_burst import WRITERS as BURST_WRITERS
from scripts.benchmarks.realtime_burst import WRITES as BURST_WRITES
from scripts.benchmarks.realtime_cost import DESIGNS
from scripts.benchmarks.realtime_cost import SIZES as REALTIME_COST_SIZES
from scripts.benchmarks.silent_pushes import SIZES as PUSH_SIZES
from scripts.benchmarks.visibility import SEEN, SHARED_WITH
from scripts.benchmarks.visibility import SIZES as VISIBILITY_SIZES
from scripts.benchmarks.writes import units_person

# Not marked serial: no figure is asserted, so it runs beside another worker in
# scripts/test --all (alone, it was 272 s of the serial part).

OPERATIONS = {
    "changes: page of 100 Person",
    "changes: poll, no changes",
    "changes: incremental, 10 changes",
    "createPerson",
    "updatePerson",
    "pushChanges: 100 updates",
    "  vs fewest raw transactions",
}


def test_bench_smoke_prints_and_saves_a_complete_table(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "scripts.bench", "--smoke", "--out", str(tmp_path)],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert "operation" in out and "raw p50" in out and "ratio" in out and "/floor" in out
    assert "us-east-1" in out  # costs name the prices they use, with their region
    assert "ms per request by layer" in out  # the split: HTTP, auth, GraphQL, store, ...
    for operation in OPERATIONS:
        assert operation in out
    (saved,) = tmp_path.glob("*-smoke.json")
    data = json.loads(saved.read_text())
    _the_page_was_written_from(data, tmp_path)
    assert data["machine"]["cpus"] and data["date"]
    rows = {(r["operation"], r["clients"]): r for r in data["rows"]}
    assert set(rows) == {(op, c) for op in OPERATIONS for c in (1, 8)}
    for row in rows.values():
        for key in ("p50_ms", "p95_ms", "p99_ms", "rps", "raw_p50_ms", "ratio_p50"):
            assert math.isfinite(row[key]) and row[key] > 0, (row["operation"], key)
        assert row["p50_ms"] <= row["p95_ms"] <= row["p99_ms"]
        assert row["read_units"] + row["write_units"] > 0
        if not row["operation"].lstrip().startswith(("pushChanges", "vs fewest")):
            # The floor: the same raw call behind a bare route on the same server stack.
            assert math.isfinite(row["floor_p50_ms"]) and row["floor_p50_ms"] > 0, row
            assert row["floor_ratio_p50"] == row["p50_ms"] / row["floor_p50_ms"]
        if row["operation"].startswith("changes"):
            # The library's floor: the same Query through a bare Strawberry schema.
            assert math.isfinite(row["library_p50_ms"]) and row["library_p50_ms"] > 0, row
            ratio = row["library_p50_ms"] / row["floor_p50_ms"]
            assert row["library_floor_ratio_p50"] == ratio
        else:
            assert row["library_p50_ms"] is None, row
    for operation, split in data["split_ms"].items():
        layers = sum(v for k, v in split.items() if k != "wall (profiled)")
        assert 0 < layers <= split["wall (profiled)"] * 1.05, (operation, split)
    assert set(data["scale"]) == {"small", "large"}
    assert data["scale"]["large"]["size"] > data["scale"]["small"]["size"]
    bulk = data["bulk_sync"]["items"]
    assert bulk == SMOKE_BULK and data["bulk_sync"]["pages"] >= bulk // 1000
    assert set(data["write_throughput"]) == {"8 writers, 1 tenant", "8 writers, 8 tenants"}
    units = data["write_units"]
    assert set(units) == {
        "create",
        "update",
        "update, history off",
        "push of 100 updates",
        "push of 100 updates, history off",
    }
    for name, by_state in units.items():
        # A process that wrote the previous transaction checks nothing: never dearer.
        assert 0 < by_state["hot"] <= by_state["cold"], name
    # The kept version: one more item per update.
    assert units["update, history off"]["hot"] < units["update"]["hot"]
    churn = data["churned_first_sync"]
    assert churn["churn-min"]["items"] == churn["live"]
    # Deletions are left out, but for the latest write's (contract 3.6): the loaded
    # tenant's last record may be a deletion.
    assert churn["live"] <= churn["churn"]["items"] <= churn["live"] + 1
    tenancy = data["tenancy"]
    assert set(tenancy) == {"first sync (baseline)", "export", "delete"}
    assert tenancy["export"]["bytes"] > 0 and tenancy["export"]["write_units"] > 0
    # Published with one PUT, downloaded with one GET of the presigned link.
    assert tenancy["export"]["s3_requests"] == {"PUT": 1, "GET": 1}
    assert tenancy["export"]["s3_usd"] > 0
    # The bulk tenant's entities and their log entries (and the head) go, in calls of
    # at most ITEMS_PER_CALL items.
    assert tenancy["delete"]["write_units"] >= 2 * bulk
    assert tenancy["delete"]["calls"] >= math.ceil((2 * bulk + 1) / ITEMS_PER_CALL)
    sweep = data["incremental_sync_units"]
    assert [w["changes"] for w in sweep] == [1, 5, 10, 11, 20, 40, 100, 300]
    for w in sweep:
        assert w["read_units"] >= w["min_read_units"] >= 1, w
        assert w["pages"] == math.ceil(w["changes"] / 100), w
    realtime = data["realtime"]
    for server in ("same_server", "cross_server", "relayed"):
        figures = realtime[server]
        assert 0 <= figures["p50_ms"] <= figures["p99_ms"], server
        assert 0 < figures["from_send_p50_ms"] <= figures["from_send_p99_ms"], server
    assert realtime["events_per_s"] > 0 and realtime["memory_per_connection_kb"] > 0
    assert realtime["fan_out_subscribers"] == REALTIME_SIZES["smoke"][1]
    burst = realtime["burst"]  # writes on four of six servers, measured on the others
    assert burst["writes"] == len(BURST_WRITERS) * BURST_WRITES["smoke"], burst
    assert burst["servers"] == 6 and burst["m_reads_stream"], burst
    # Every group: the reader's own subscribers, the relayed, through the TCP proxy,
    # and the server whose URL names another's (it reads the stream itself).
    assert set(burst["groups"]) == set(BURST_GROUPS), burst
    for side in burst["groups"].values():
        assert side["n"] > 0 and 0 <= side["p50_ms"] <= side["p99_ms"] <= side["max_ms"]
    assert "realtime under a burst" in out
    assert "realtime:" in out
    attachments = data["attachments"]
    assert attachments["rounds"] >= 3
    sizes = attachments["sizes"]
    assert set(sizes) == {"100 KB", "5 MB"}
    for label, a in sizes.items():
        for key in (
            "upload_p50_ms",
            "raw_upload_p50_ms",
            "upload_ratio_p50",
            "download_p50_ms",
            "raw_download_p50_ms",
            "download_ratio_p50",
        ):
            assert math.isfinite(a[key]) and a[key] > 0, (label, key)
        # One attachment, as the S3 engine counted it: the server's HeadObject in each
        # GraphQL call (and, on this engine only, attachment's read to hash the
        # bytes), the client's one PUT and one GET; of DynamoDB, requestUpload's read
        # of the tenant's blob generation and its reservation against the quota (one
        # UpdateItem, one write unit), and attachment's read of the generation: two
        # consistent GetItems of a small item (contract 3.10); and each call's check of
        # the caller's access (contract 6): one Query each, of a claim tenant's empty
        # partition here, which DynamoDB Local reports as 0 read units. Whether the
        # tenant has restricted records (contract 3.10: then no dedup, and a link only
        # through a record) is a flag on the usage item those GetItems read: no more.
        assert a["graphql_calls"] == 2, label
        assert a["s3_requests"] == {
            "requestUpload": {"HEAD": 1},
            "put": {"PUT": 1},
            "attachment": {"HEAD": 1, "GET": 1},
            "get": {"GET": 1},
        }, label
        assert a["server_s3_requests"] == {"HEAD": 2, "GET": 1}, label
        assert a["client_s3_requests"] == {"PUT": 1, "GET": 1}, label
        assert a["local_only_s3_requests"] == {"GET": 1}, label
        assert (a["dynamodb_calls"], a["write_units"], a["read_units"]) == (5, 1, 2), label
        cost = a["aws_cost"]
        for key in ("storage_month_usd", "upload_usd", "download_usd", "first_month_usd"):
            assert cost[key] > 0, (label, key)
        # Under $1 a million: 2 consistent read units and 1 write unit.
        assert 0 < cost["dynamodb_usd"] < 0.000001, label
    small, big = sizes["100 KB"]["aws_cost"], sizes["5 MB"]["aws_cost"]
    # The same requests whatever the size; storage and bytes out grow with it.
    assert small["upload_usd"] == big["upload_usd"]
    assert small["storage_month_usd"] < big["storage_month_usd"]
    assert small["download_usd"] < big["download_usd"]
    assert "attachments:" in out and "S3 Standard, us-east-1" in out
    cost = data["cost"]
    assert (cost["memory_mb"], cost["architecture"]) == shipped_lambda()
    assert "all in, $ per million operations" in out and "AppSync" in out
    assert set(cost["operations"]) == set(COST_ROWS)
    for name, c in cost["operations"].items():
        # the same DynamoDB work as the row of the table, priced beside AppSync's
        assert c["dynamodb"] == rows[(COST_ROWS[name], 1)]["cost_per_million_usd"], name
        assert c["billed_ms"] >= 1 and c["s3"] == 0
        parts = ("http_api", "lambda_requests", "lambda_duration", "dynamodb", "s3", "cloudwatch")
        assert c["cloudwatch"] > 0, name  # its EMF line's bytes
        assert math.isclose(c["total"], sum(c[p] for p in parts)), name
        # Each write beside AppSync with DataStore's own writes, of the record whose
        # writes the row's units are; a read beside today's bar alone.
        assert c["appsync_datastore"] == datastore.comparator(name, units_person()), name
        assert (c["appsync_datastore"] is None) == COST_ROWS[name].startswith("changes:"), name
    for line in datastore.verdicts(cost["operations"]):
        assert line in out
    check_realtime_cost(data["realtime_cost"], out)
    check_visibility(data["visibility"], out)
    check_silent_pushes(data["silent_pushes"], out)
    check_app_pages(data["app_pages"], out)
    check_tenant_wide_units_unchanged(data)


def _the_page_was_written_from(data: dict[str, Any], out: Path) -> None:
    """The page's section and plots, in the run's --out folder (never docs/), are this
    run's: its JSON copied beside them, the section rendered from it with the run's
    date, and the plots' hashes recorded against it (what scripts/check compares)."""
    folder = out / page.FOLDER
    assert json.loads((folder / page.JSON_NAME).read_text()) == data
    text = (out / page.PAGE).read_text()
    assert page.section(data) in text and data["date"][:10] in text
    assert f"`scripts/bench --smoke` on {data['date'][:10]}" in text
    first = data["rows"][0]
    assert f"| {first['operation']} | 1 | {first['p50_ms']:.2f} |" in text
    for plot in page.PLOTS:
        assert (folder / plot).read_bytes().startswith(b"\x89PNG"), plot
    assert page.stale(out) == []
    # The committed page keeps its prose around the section.
    committed = (page.DOCS / page.PAGE).read_text()
    assert text.split(page.BEGIN)[0] == committed.split(page.BEGIN)[0]
    # And the figures other pages quote from the run, rendered from it.
    for quoting in quoted.PAGES:
        assert quoting.section(data) in (out / quoting.page).read_text(), quoting.page
        assert quoting.stale(out) == [], quoting.page


def check_realtime_cost(rt: dict[str, Any], out: str) -> None:
    """Realtime all in (scripts/benchmarks/realtime_cost.py): every realtime function
    invoked and measured, a device-hour by design and a fan-out, beside AppSync's."""
    assert "realtime all in, $ per million device-hours" in out
    invocations = rt["invocations"]
    fan = REALTIME_COST_SIZES["smoke"][1]
    kinds = {"$connect", "connection_init", "subscribe", "ping", "$disconnect"}
    assert set(invocations) == kinds | {"fan-out, 1 subscriber", f"fan-out, {fan} subscribers"}
    for name, k in invocations.items():
        assert k["calls"] >= 1 and math.isfinite(k["billed_ms"]) and k["billed_ms"] >= 1, name
    # What each writes to the table: a connection item (init), the subscription's
    # transaction of two items (subscribe), a claim per subscriber poked.
    assert invocations["connection_init"]["write_units"] >= 1
    assert invocations["subscribe"]["write_units"] >= 4
    assert invocations[f"fan-out, {fan} subscribers"]["write_units"] >= fan
    assert invocations[f"fan-out, {fan} subscribers"]["messages_out"] == fan
    assert set(rt["device_hour"]) == {d.name for d in DESIGNS}
    rt_parts = ("connection_minutes", "messages", "lambda", "dynamodb", "sqs", "cloudwatch", "sync")
    for name, c in rt["device_hour"].items():
        assert all(math.isfinite(c[p]) and c[p] >= 0 for p in rt_parts), name
        assert math.isclose(c["total"], sum(c[p] for p in rt_parts)), name
        assert c["appsync"] > 0 and c["connection_minutes"] > 0 and c["messages"] > 0, name
    assert 0 < rt["socket_floor"] < min(c["total"] for c in rt["device_hour"].values())
    for name, f in rt["fan_out"].items():
        assert f["devices"] == fan and math.isfinite(f["total"]) and f["appsync"] > 0, name
    assert math.isfinite(rt["polling"]["par_interval_min"])


def check_tenant_wide_units_unchanged(data: dict[str, Any]) -> None:
    """A tenant that never restricts a record costs what it did (issue "Who sees
    what"): every row's units and the write units, cold and hot, are the committed
    run's (docs/benchmarks/bench.json), whatever the mode (the units of a page, a
    poll or a write do not depend on the tenants' sizes)."""
    committed = json.loads((page.DOCS / page.FOLDER / page.JSON_NAME).read_text())
    units = {
        (r["operation"], r["clients"]): (r["read_units"], r["write_units"]) for r in data["rows"]
    }
    before = {
        (r["operation"], r["clients"]): (r["read_units"], r["write_units"])
        for r in committed["rows"]
    }
    assert units == before
    assert data["write_units"] == committed["write_units"]


def check_visibility(v: dict[str, Any], out: str) -> None:
    """Who sees what (scripts/benchmarks/visibility.py): a member seeing 100 records
    of a tenant of many, beside a tenant of just those, within the issue's bounds
    (read and write units, not times)."""
    assert "who sees what" in out
    size, changes = VISIBILITY_SIZES["smoke"]
    assert (v["size"], v["seen"], v["changes"]) == (size, SEEN, changes)
    first, plain, after, idle = v["reads"].values()
    assert first["items"] == plain["items"] == SEEN and after["items"] == idle["items"] == 0
    assert plain["read_units"] > 0 and first["read_units"] <= 2 * plain["read_units"], v
    assert idle["read_units"] > 0 and after["read_units"] <= idle["read_units"], v
    writes = v["writes"]
    assert list(writes) == ["tenant-wide", "private", *(f"shared with {k}" for k in SHARED_WITH)]
    wide = writes["tenant-wide"]["write_units"]
    assert wide > 0 and writes["private"]["write_units"] <= 1.25 * wide, writes
    shared = [writes[f"shared with {k}"]["write_units"] for k in SHARED_WITH]
    assert writes["private"]["write_units"] < shared[0] < shared[1] < shared[2], writes
    for row in [*v["reads"].values(), *writes.values()]:
        assert row["usd_per_million"] > 0, row


def check_silent_pushes(p: dict[str, Any], out: str) -> None:
    """Silent pushes (scripts/benchmarks/silent_pushes.py, measured by
    scripts/bench_silent_pushes.py's functions): every row priced, every push sent."""
    assert "silent pushes, $ a million, against AppSync" in out
    assert "commit to push published" in out
    devices, rounds, writes = PUSH_SIZES["smoke"]
    hour, fan = p["device_hour"], p["fan_out"]
    assert set(hour["parts"]) == set(per_push_parts(p["rounds"]["one device"], p["sync"]))
    assert math.isclose(hour["total"], sum(hour["parts"].values()))
    assert hour["total"] > 0 and hour["appsync"] > 0
    assert fan["devices"] == devices and 0 < fan["total"] < fan["with_syncs"]
    one, many = p["rounds"].values()
    assert (one["devices"], one["rounds"], one["sent"]) == (1, rounds, 1)
    assert (many["devices"], many["sent"]) == (devices, devices)
    burst = p["burst"]
    assert burst["pushes"] == writes  # each tenant's other device, once
    assert 0 < burst["p50_ms"] <= burst["p99_ms"] and burst["write_p50_ms"] > 0


def check_app_pages(a: dict[str, Any], out: str) -> None:
    """The second example's page beside the family's (scripts/benchmarks/app_pages.py)."""
    assert "each example app's first-sync page" in out
    family, tasks = a["pages"].values()
    assert family["bytes_ratio"] == family["p50_ratio"] == 1
    assert tasks["bytes"] > family["bytes"] > 0 and tasks["bytes_ratio"] > 1
    assert 0 < tasks["p50"] <= tasks["p95"]
