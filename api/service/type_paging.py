"""Filling a page of chosen types (`changes(types:)`, `api.service.reading`): the
sizes of the Queries it makes beyond its first."""

from __future__ import annotations

import math

# The largest Query while filling such a page: a full page (`reading.MAX_LIMIT`; a
# limit of 1 once cost one Query per entry read).
SCAN_PAGE = 1000
# Its first Queries beyond the page's first are sized to the wanted entries the page
# still misses, at the density of wanted entries it has read so far, plus this many
# standard deviations of a Poisson count of them: the next page re-reads what a page
# read past its last item, and a Query's size is rounded up to 4 KB (DynamoDB Local
# reports whole read units per Query). Then full pages. A 1-in-3 type of a tenant of
# 5,000 entries of some 340 bytes, in pages of 100, read 3.45x the units of pages of
# 1,000 in Queries of 1,000; sized so, 1.15x (484 against 421; the whole tenant in
# pages of 100 reads 1.18x its pages of 1,000: scripts/bench-types-paging). A model
# of the same reads put these margins at 1.15x, the best it found at 1.12x with more
# Queries, and a Limit that knew where the page ends at 1.07x.
SCAN_MARGINS = (0.0, 1.0, 2.0)
# A page of chosen types asks its first Query for this many standard deviations
# (of a Poisson count, sqrt(limit)) more than its limit, up to MAX_LIMIT: a type of
# 99% of a tenant's entries otherwise fills a page of 100 only with a second Query
# of 2-3 entries, a whole read unit for 1 KB (Queries round up to 4 KB). Four
# entries more cost about a third of a unit (scripts/bench-types-paging, people).
FIRST_MARGIN = 0.4


def scan_size(missing: int, kept: int, read: int, queries: int) -> int:
    """The Limit of a page's next Query beyond its first (`queries` made so far):
    enough for `missing` wanted entries at the density seen so far, `kept` of `read`
    (SCAN_MARGINS); a full page after those, or while none was seen."""
    if kept == 0 or queries >= len(SCAN_MARGINS):
        return SCAN_PAGE
    wanted = missing + SCAN_MARGINS[queries] * math.sqrt(missing)
    return min(SCAN_PAGE, math.ceil(wanted * read / kept))
