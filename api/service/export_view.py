"""Whether an export's file may hold a record that has left its caller's view since
the export began (contract 3.9, 3.12): then it is linked no more, nor continued.

A record leaves a member's view at a write that puts a LeftView sentinel where that
member read it (docs/ordering.md, "Who sees what"): in the member's own stream (it
was shared with the member), in a group's stream (it was shared with a group the
member is in), or in the main log (it was tenant-wide). Every read of the export
follows its first sync's first read, which proves every write up to the job's
`begun`; so a record the file holds that left the caller's view since left it at a
token above `begun`, and a sentinel of it lies there in one of those partitions. The
check reads them (`ExportJobs.left_view`) and asks whether the caller sees each
such record now (one BatchGetItem of their entities, as `history` asks it): one it
no longer sees, and the file is refused. One it sees again (shared anew, or moved to
a group of the caller's) costs nothing: the file holds only versions the caller saw
of records it sees.

What it costs: a GetItem of the head, then a consistent Query of each partition
above the job's `checked` (else `begun`: the main log, the caller's stream, each
group's of the job), reading every entry there (a sentinel is told apart by an
attribute, not its key), within CHECK_READ_UNITS. What a call found so is saved with
the job's next step as `checked` (the entries below the head's transaction, all
applied when the head was read): a call reads what was written since the last. An
export whose partitions hold more than those units read since is refused as well
("start a new export"), as one older than the tenant's retention (the sentinels
expire with it)."""

from __future__ import annotations

from api.domain.errors import NotFound
from api.domain.exports import ExportJob
from api.domain.retention import Retention
from api.domain.visibility import group_principal, member_principal
from api.service.export_ports import ExportJobs
from api.service.reading import Reading

# Read units the check may spend at most (of a call's 300, contract 3.9): about 400 KB
# of the caller's partitions' entries since its export began (some 800 tenant-wide
# records of 500 bytes changed since).
CHECK_READ_UNITS = 100.0
_SEEN_BATCH = 100  # ids per BatchGetItem
# `begun` of a first sync of a tenant whose head was its first transaction (no token
# before it): below every token.
FROM_START = "0" * 26


def check_still_viewed(
    jobs: ExportJobs, reading: Reading, retention: Retention, job: ExportJob, by: str, now_ms: int
) -> str | None:
    """NOT_FOUND when the file of `job` (as far as written) may hold a record that has
    left the view of its caller `by` (the request's viewer, its groups now) since the
    export began; nothing said of which. Else the token up to which that is now known
    (the job's `checked`: the next call reads above it only, so a busy tenant's
    export, checked at each call, reads each change once)."""
    begun = job.begun or job.history_token or job.change_token
    if begun is None:
        return job.checked  # nothing of the tenant read yet (or it had no change then)
    since = max(begun, job.checked or begun)
    refusal = NotFound(
        f"no export {job.export_id} of this tenant for you: what you see of it changed "
        "since it began; start a new export"
    )
    if retention.past(job.asked_at_ms, now_ms):
        # A sentinel written since it began may have expired (TTL): what left is untold.
        raise refusal
    principals = [member_principal(job.asked_by), *map(group_principal, job.groups)]
    left, complete, proven = jobs.left_view(job.tenant_id, principals, since, CHECK_READ_UNITS)
    if not complete:
        raise refusal
    ids = sorted(left)
    for start in range(0, len(ids), _SEEN_BATCH):
        batch = set(ids[start : start + _SEEN_BATCH])
        if reading.seen(job.tenant_id, batch, by) != batch:
            raise refusal
    # A record seen again stays so unless it leaves once more: above `proven`.
    return max(since, proven or since)
