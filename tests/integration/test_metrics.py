"""The operators' metrics read as their consumers read them (docs/operations.md):
`/metrics` through prometheus-client's own parser, the EMF lines against the
Embedded Metric Format specification's structure, after the same known traffic."""

from __future__ import annotations

import dataclasses
import io
import json
import re
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from api import metrics
from api.app import create_app
from api.prometheus_metrics import write_sweep_textfile
from api.settings import PROJECT_ROOT, Settings
from tests.support.faults import Fault, connection_refused
from tests.support.gql import GraphQLClient, bearer
from tests.support.prometheus_text import samples_of_file

Inject = Callable[[str, Callable[..., Any]], None]
TOKEN = "metrics-token"
POLLS = 3
PUSHED = 4
POLL = "query($t: ID!) { changes(tenantID: $t) { changeToken } }"
PUSH = "mutation($i: PushChangesInput!) { pushChanges(input: $i) { results { status } } }"
YEAR_MS = 365 * 24 * 3600 * 1000


def _known_traffic(client: TestClient, tenant: str, inject: Inject, settings: Settings) -> None:
    """n polls, one CONFLICT, one UNAVAILABLE, one RESYNC_REQUIRED, a push of k entries."""
    # A change written a year ago (a server whose clock is behind, counted nowhere):
    # a sync from it must resync.
    past = dataclasses.replace(settings, clock_offset_ms=-YEAR_MS, metrics="off")
    with TestClient(create_app(past)) as old:
        old_token = GraphQLClient(old).create(tenant, "Person", {})["changeToken"]
    gql = GraphQLClient(client)
    person = gql.create(tenant, "Person", {"givenName": "a"})
    for _ in range(POLLS):
        assert "errors" not in gql.execute(POLL, {"t": tenant})
    stale = old_token  # not its token
    conflict = gql.execute(
        "mutation($i: UpdatePersonInput!) { updatePerson(input: $i) { person { id } } }",
        {"i": {"tenantID": tenant, "id": person["id"], "changeToken": stale, "changes": {}}},
    )
    assert conflict["errors"][0]["extensions"]["code"] == "CONFLICT"
    resync = gql.execute(
        "query($t: ID!, $s: ID) { changes(tenantID: $t, since: $s) { changeToken } }",
        {"t": tenant, "s": old_token},
    )
    assert resync["errors"][0]["extensions"]["code"] == "RESYNC_REQUIRED"
    entries = [
        {"createPerson": {"tenantID": tenant, "clientMutationID": f"m{i}", "person": {}}}
        for i in range(PUSHED)
    ]
    pushed = gql.execute(PUSH, {"i": {"tenantID": tenant, "mutations": entries}})
    assert [r["status"] for r in pushed["data"]["pushChanges"]["results"]] == ["APPLIED"] * PUSHED
    inject("before-send.dynamodb.Query", Fault(connection_refused()))
    unavailable = gql.execute(POLL, {"t": tenant})
    assert unavailable["errors"][0]["extensions"]["code"] == "UNAVAILABLE"


# What that traffic must count, by (metric, dimensions); n polls plus the
# RESYNC_REQUIRED and UNAVAILABLE ones are `changes`.
EXPECTED = {
    ("Requests", (("outcome", "OK"), ("rootField", "changes"))): POLLS,
    ("Requests", (("outcome", "RESYNC_REQUIRED"), ("rootField", "changes"))): 1,
    ("Requests", (("outcome", "UNAVAILABLE"), ("rootField", "changes"))): 1,
    ("Requests", (("outcome", "CONFLICT"), ("rootField", "updatePerson"))): 1,
    ("Requests", (("outcome", "OK"), ("rootField", "createPerson"))): 1,
    ("Requests", (("outcome", "OK"), ("rootField", "pushChanges"))): 1,
    ("Conflicts", ()): 1,
    ("ResyncRequired", ()): 1,
    ("Unavailable", ()): 1,
    ("TenantDeleted", ()): 0,
    ("PushEntries", (("status", "APPLIED"),)): PUSHED,
}


def _settings(settings: Settings, kind: str) -> Settings:
    return dataclasses.replace(settings, health_token=TOKEN, metrics=kind)


def test_metrics_is_prometheus_exposition_for_the_health_token_holder_only(
    settings: Settings, tenant: str, inject: Inject, tmp_path: Path
) -> None:
    with TestClient(create_app(_settings(settings, "prometheus"))) as client:
        _known_traffic(client, tenant, inject, settings)
        assert client.get("/metrics").status_code == 401
        assert client.get("/metrics", headers=bearer([tenant])).status_code == 401
        scraped = client.get("/metrics", headers={"authorization": f"Bearer {TOKEN}"})
    assert scraped.status_code == 200
    assert scraped.headers["content-type"].startswith("text/plain; version=")
    samples = [
        s
        for family in text_string_to_metric_families(scraped.text)
        for s in family.samples
        if s.name.endswith("_total")
    ]
    counted: defaultdict[tuple[str, tuple[tuple[str, str], ...]], float] = defaultdict(float)
    for sample in samples:
        metric = next(m for m in metrics.CATALOG if f"{m.prometheus_name}_total" == sample.name)
        labels = {_camel(k): v for k, v in sample.labels.items()}
        counted[(metric.name, tuple(sorted(labels.items())))] += sample.value
        # The per-metric totals, whatever the request's dimensions.
        if metric.name != "Requests":
            kept = {k: v for k, v in labels.items() if k not in metrics.REQUEST_DIMENSIONS}
            counted[(metric.name, tuple(sorted(kept.items())))] += sample.value
    for key, value in EXPECTED.items():
        assert counted[key] == value, key
    assert not any("tenant" in s.labels for s in samples)
    # The latency histogram counted every request it saw.
    latency = {
        tuple(sorted(s.labels.items())): s.value
        for family in text_string_to_metric_families(scraped.text)
        for s in family.samples
        if s.name == "sync_latency_seconds_count"
    }
    assert latency[(("outcome", "OK"), ("root_field", "changes"))] == POLLS
    # A series /metrics declares (its family's HELP and TYPE) but has no sample of yet,
    # being labelled and not yet counted (TenantThrottled here), is exposed too.
    families = list(text_string_to_metric_families(scraped.text))
    declared = {f"{f.name}_total" for f in families if f.type == "counter"}
    exposed = {s.name for f in families for s in f.samples} | declared
    assert {"sync_relay_pending", "sync_relay_behind_seconds"} <= exposed
    # The sweep's, on a server: the file scripts/sweep --metrics-file writes.
    sweep = tmp_path / "sweep.prom"
    write_sweep_textfile(str(sweep), calls=1, failed=False, now_s=1.0)
    _check_alert_rules(exposed | set(samples_of_file(sweep)))


# Series Prometheus makes itself (not a target's): `up` is 0 when a scrape fails.
_PROMETHEUS_OWN = {"up"}


def _check_alert_rules(exposed: set[str]) -> None:
    """Each rule of prometheus-alerts.yml reads series /metrics exposes (or the
    sweep's file, for the sweep's rules)."""
    rules = yaml.safe_load((PROJECT_ROOT / "prometheus-alerts.yml").read_text())
    (group,) = rules["groups"]
    assert group["rules"]
    for rule in group["rules"]:
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule
        series = set(re.findall(r"\b(sync_[a-z0-9_]+|up)\b", rule["expr"]))
        assert series, rule["alert"]
        for name in series:
            assert name in exposed or name in _PROMETHEUS_OWN, (rule["alert"], name)


def test_emf_lines_are_the_request_log_lines_with_the_same_counts(
    settings: Settings, tenant: str, inject: Inject
) -> None:
    out = io.StringIO()
    app = create_app(_settings(settings, "emf"), sink=metrics.Emf(out))
    with TestClient(app) as client:
        _known_traffic(client, tenant, inject, settings)
        assert client.get("/metrics").status_code == 404  # CloudWatch's, not Prometheus'
    lines = out.getvalue().splitlines()
    documents = [json.loads(line) for line in lines]  # each line one whole document
    counted: defaultdict[tuple[str, tuple[tuple[str, str], ...]], float] = defaultdict(float)
    for document in documents:
        _check_emf(document)
        if document["rootField"] != metrics.NONE:  # (not GET /metrics)
            assert document["tenant"] == tenant  # a property of the line ...
        for directive in document["_aws"]["CloudWatchMetrics"]:
            assert not any(
                "tenant" in dims for dims in directive["Dimensions"]
            )  # ... never a dimension
            for definition in directive["Metrics"]:
                name = definition["Name"]
                value = sum(_values(document[name]))
                for dims in directive["Dimensions"]:
                    key = tuple(sorted((d, document[d]) for d in dims))
                    counted[(name, key)] += value
    for (name, dims), value in EXPECTED.items():
        if name == "PushEntries":  # folded into the name on CloudWatch
            name, dims = "PushEntries" + dict(dims)["status"].capitalize(), ()
        assert counted[(name, dims)] == value, (name, dims)
    assert counted[("Requests", ())] == POLLS + 6  # and GET /metrics (404)
    # The request log's own fields are in the document.
    poll = next(d for d in documents if d["rootField"] == "changes" and d["outcome"] == "OK")
    assert {"requestId", "operation", "sub", "status", "capacityUnits", "durationMs"} <= set(poll)


def _values(member: Any) -> list[float]:
    return member if isinstance(member, list) else [member]


_UNITS = {
    "Seconds", "Microseconds", "Milliseconds", "Bytes", "Kilobytes", "Megabytes", "Gigabytes",
    "Terabytes", "Bits", "Kilobits", "Megabits", "Gigabits", "Terabits", "Percent", "Count",
    "Bytes/Second", "Kilobytes/Second", "Megabytes/Second", "Gigabytes/Second",
    "Terabytes/Second", "Bits/Second", "Kilobits/Second", "Megabits/Second",
    "Gigabits/Second", "Terabits/Second", "Count/Second", "None",
}  # fmt: skip


def _check_emf(document: dict[str, Any]) -> None:
    """The structure the Embedded Metric Format specification gives a document
    (CloudWatch User Guide, "Specification: Embedded metric format")."""
    meta = document["_aws"]
    assert isinstance(meta["Timestamp"], int) and meta["Timestamp"] > 0
    directives = meta["CloudWatchMetrics"]
    assert isinstance(directives, list) and directives
    for directive in directives:
        assert 1 <= len(directive["Namespace"]) <= 255
        assert re.fullmatch(r"[A-Za-z0-9._/#:-]+", directive["Namespace"])
        assert isinstance(directive["Dimensions"], list)
        for dims in directive["Dimensions"]:
            assert len(dims) <= 30
            for dim in dims:  # a dimension names a top-level string member
                assert isinstance(document[dim], str) and 1 <= len(document[dim]) <= 1024
        assert 1 <= len(directive["Metrics"]) <= 100
        for definition in directive["Metrics"]:
            assert 1 <= len(definition["Name"]) <= 255
            assert definition.get("Unit", "None") in _UNITS
            values = _values(document[definition["Name"]])  # a member holding numbers
            assert 1 <= len(values) <= 100
            assert all(isinstance(v, int | float) for v in values)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word.capitalize() for word in rest)


def test_with_metrics_off_the_log_line_goes_through_logging_as_before(
    settings: Settings, tenant: str, caplog: pytest.LogCaptureFixture
) -> None:
    with TestClient(create_app(_settings(settings, "off"))) as client, caplog.at_level("INFO"):
        GraphQLClient(client).execute(POLL, {"t": tenant})
        assert client.get("/metrics").status_code == 404
    lines = [json.loads(r.message) for r in caplog.records if r.name == "api.request"]
    poll, scrape = lines[-2:]
    assert poll["rootField"] == "changes" and "_aws" not in poll
    assert scrape["rootField"] is None and scrape["status"] == 404
