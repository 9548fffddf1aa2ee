"""A sync of chosen types reads each log entry about once, whatever its page size:
a page's Queries beyond its first are sized to what it still misses, so the next
page does not read again what this one read past its last item. Counted in the
read units DynamoDB Local reports (ConsumedCapacity)."""

from __future__ import annotations

from api.domain.cursor import CursorCodec
from api.service.reading import Reading
from api.settings import Settings
from api.storage.store import DynamoStore
from scripts.bench_types_paging import seed, sync
from tests.support.family import PERSON, REMINDER

RECORDS = 1500


def test_a_types_sync_in_pages_of_100_reads_about_what_pages_of_1000_read(
    settings: Settings, tenant: str
) -> None:
    # One record in 3 a reminder, at random places: a page of 100 reminders spans
    # some 300 entries. Pages of 100 in Queries of 1,000 read 3.4x pages of 1,000.
    seed(tenant, RECORDS // 3, RECORDS)
    reading = Reading(DynamoStore(), CursorCodec(settings.cursor_secret))
    small, ids = sync(reading, tenant, 100, frozenset({REMINDER}))
    large, same = sync(reading, tenant, 1000, frozenset({REMINDER}))
    whole, _ = sync(reading, tenant, 100, None)
    assert ids == same and len(set(ids)) == RECORDS // 3
    # Measured: 146 read units against 128 (1.14x; 352 before, 2.75x), and 150 for the
    # whole tenant in pages of 100. Not 1.1x: each page of 100 costs the head's GetItem
    # (1 unit) and at least two Queries, each rounded up to 4 KB, some 2 units a page
    # that one page of 1,000 pays once (scripts/bench-types-paging).
    assert small.read_units <= 1.2 * large.read_units, (small, large, whole)
    assert small.read_units <= 1.05 * whole.read_units, (small, large, whole)


def test_a_page_of_a_dense_type_reads_no_more_than_the_whole_tenants(
    settings: Settings, tenant: str
) -> None:
    # 99 records in 100 people: a page of 100 people spans some 101 entries. Its
    # first Query asked for 100 and a second for the last one or two, a read unit
    # each (rounded up to 4 KB): 1.06x the whole tenant's pages of 100 (528 units
    # against 500 for 5,000 records, scripts/bench-types-paging); 0.99x asked with
    # FIRST_MARGIN's few entries more.
    seed(tenant, RECORDS // 100, RECORDS)
    reading = Reading(DynamoStore(), CursorCodec(settings.cursor_secret))
    people, ids = sync(reading, tenant, 100, frozenset({PERSON}))
    whole, _ = sync(reading, tenant, 100, None)
    assert len(set(ids)) == RECORDS - RECORDS // 100
    assert people.read_units <= whole.read_units, (people, whole)
