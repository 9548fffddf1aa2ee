"""The all-in cost of an operation (`scripts/benchmarks/cost.py`), from the prices
stated once (`scripts/benchmarks/prices.py`): its parts, and where AppSync costs
the same."""

from __future__ import annotations

import math

from scripts.benchmarks import prices
from scripts.benchmarks.cost import price


def test_a_poll_is_priced_by_its_parts() -> None:
    c = price(billed_ms=10, gb=1.0, read_units=1, write_units=0)
    assert math.isclose(c["http_api"], 1.00)
    assert math.isclose(c["lambda_requests"], 0.20)
    assert math.isclose(c["lambda_duration"], 10 / 1000 * prices.LAMBDA_ARM64_GB_SECOND_USD * 1e6)
    assert math.isclose(c["dynamodb"], 0.125)
    assert math.isclose(c["total"], 1.00 + 0.20 + c["lambda_duration"] + 0.125)
    assert math.isclose(c["appsync"], 4.00 + 0.125)
    assert math.isclose(c["function_url_total"], c["total"] - 1.00)


def test_appsync_costs_the_same_at_the_crossover() -> None:
    at = price(billed_ms=1, gb=1.0, read_units=10, write_units=8)
    # $2.80 a million of API Gateway and Lambda requests under AppSync's $4.00:
    # about 210 ms at 1 GB; 285 ms behind a function URL, which adds nothing.
    assert round(at["crossover_ms"]) == 210
    assert round(at["crossover_ms_function_url"]) == 285
    same = price(at["crossover_ms"], 1.0, 10, 8)
    assert math.isclose(same["total"], same["appsync"])
    # Half the memory, twice the time.
    assert math.isclose(price(1, 0.5, 0, 0)["crossover_ms"], 2 * at["crossover_ms"])


def test_a_request_past_512_kb_is_metered_as_more_than_one() -> None:
    assert math.isclose(price(1, 1.0, 0, 0, http_requests=2)["http_api"], 2.00)


def test_the_log_line_is_priced_as_ingested_and_kept_a_month() -> None:
    line = price(1, 1.0, 0, 0, log_bytes=prices.GB / 1e6)  # a GB a million lines
    per_gb = prices.CLOUDWATCH_LOGS_INGEST_GB_USD + prices.CLOUDWATCH_LOGS_STORAGE_GB_MONTH_USD
    assert math.isclose(line["cloudwatch"], per_gb)
    assert math.isclose(line["total"], price(1, 1.0, 0, 0)["total"] + per_gb)
