"""Silent pushes wired from settings (docs/realtime.md, "Silent pushes"): the
devices' items, SNS's endpoints, the service's rounds; for the app (registration,
a server's own rounds) and the AWS fan-out (its rounds, the push queue's)."""

from __future__ import annotations

from collections.abc import Callable

from api.domain.membership import Roster
from api.ordering import wall_clock_ms
from api.service.pushes import Pushes
from api.settings import Settings
from api.storage.devices import DeviceTable
from api.storage.lazy_client import LazyClient
from api.storage.push_endpoints import SnsEndpoints
from api.storage.store import DynamoStore


def make_pushes(
    settings: Settings,
    clock_ms: Callable[[], int] = wall_clock_ms,
    members: Callable[[str, str], Roster] | None = None,
    seen: Callable[[str, str | None, str], str | None] | None = None,
) -> Pushes | None:
    """None when no platform application is configured (pushes are off). `members`:
    the tenant's roster after a token (the service's `roster_at`); `seen`: a member's
    newest change after a token in its view (the service's `latest_seen`)."""
    if not settings.push_applications:
        return None
    return Pushes(
        DeviceTable(),
        SnsEndpoints(LazyClient(settings.sns_client), settings.push_applications),
        clock_ms,
        window_s=settings.push_window_seconds,
        per_member=settings.push_devices_per_member,
        per_tenant=settings.push_devices_per_tenant,
        members=members,
        seen=seen,
        roster=DynamoStore().roster,
    )
