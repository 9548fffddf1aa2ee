"""Silent pushes (docs/realtime.md, "Silent pushes"): devices registered per tenant
and member, within bounds; and the push of a tenant's newest change token to each
of its devices but the writer's, at most one per device per window (the last token
wins: a newer one waits for the window's end, `flush`). Only the devices of members
whose view the change is in (its audience, the pokes' rule; a catch-up's UNTOLD
others, each once its member's view is read), and still members (the tenant's
roster, read as the pokes' fan-out reads it), are pushed."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

from api.domain.audiences import Audience, in_audience, to_check
from api.domain.devices import PushDevice, check_registration, push_message
from api.domain.errors import TooManyDevices, Unavailable
from api.domain.membership import Roster

logger = logging.getLogger("api.pushes")

DEFAULT_WINDOW_S = 30.0
DEFAULT_PER_MEMBER = 10
DEFAULT_PER_TENANT = 200
# Devices of one round worked on at once (each a claim and a Publish).
PUSH_CONCURRENCY = 16


class Devices(Protocol):
    def get(self, tenant_id: str, device_id: str) -> PushDevice | None: ...
    def register(self, device: PushDevice, per_member: int, per_tenant: int, new: bool) -> None: ...
    def remove(
        self,
        tenant_id: str,
        device_id: str,
        sub: str | None,
        registered_at_ms: int | None = None,
        former: bool = False,
    ) -> bool: ...
    def devices(self, tenant_id: str) -> list[PushDevice]: ...
    def mark_empty(self, tenant_id: str) -> bool: ...
    def claim(self, device: PushDevice, token: str, now_ms: int, window_ms: int) -> bool: ...
    def defer(self, device: PushDevice, token: str) -> bool: ...
    def release(self, device: PushDevice, token: str) -> None: ...


class Endpoints(Protocol):
    def enabled(self, platform: str) -> bool: ...
    def create(self, platform: str, device_token: str) -> str: ...
    def publish(self, endpoint: str, platform: str, message: str) -> str: ...
    def delete(self, endpoint: str) -> None: ...


@dataclass
class PushRound:
    """What one round of a tenant's pushes did."""

    sent: list[tuple[str, str]] = field(default_factory=list)  # (device id, token)
    removed: list[str] = field(default_factory=list)  # devices whose endpoint was gone
    # When the earliest token left waiting is due (epoch ms; None: none waits).
    due_ms: int | None = None
    failed: int = 0  # publishes that failed (their tokens wait for the next round)
    devices: int = 0  # the tenant's devices the round read
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def wait_until(self, due: int) -> None:
        self.due_ms = due if self.due_ms is None else min(self.due_ms, due)


class Pushes:
    """Registration and the push rounds, over the devices' items and SNS."""

    def __init__(
        self,
        devices: Devices,
        endpoints: Endpoints,
        clock_ms: Callable[[], int],
        window_s: float = DEFAULT_WINDOW_S,
        per_member: int = DEFAULT_PER_MEMBER,
        per_tenant: int = DEFAULT_PER_TENANT,
        members: Callable[[str, str], Roster] | None = None,
        seen: Callable[[str, str | None, str], str | None] | None = None,
        roster: Callable[[str], Roster] | None = None,
    ) -> None:
        self._devices = devices
        # The tenant's roster read now (one Query, never a cached one): whose devices
        # are swept, their member gone (`sweep`); without it none are.
        self._roster = roster
        # The tenant's roster after a token (`Membership.roster_at`, read once per
        # tenant and change in a process): a removed member's devices get nothing.
        self._members = members
        # A member's newest change after a token, in its view (`latest_seen`), for a
        # catch-up's UNTOLD devices; without it they are left out.
        self._seen = seen
        self._endpoints = endpoints
        self._clock_ms = clock_ms
        self.window_ms = int(window_s * 1000)
        self._per_member = per_member
        self._per_tenant = per_tenant

    def register(
        self, sub: str, tenant_id: str, platform: str, device_token: str, device_id: str
    ) -> PushDevice:
        """Register (or re-register, with a new token) the caller's device: its SNS
        platform endpoint, then its item within the bounds (nothing written past them)."""
        check_registration(tenant_id, platform, device_token, device_id)
        known = self._devices.get(tenant_id, device_id)
        # Each time (an app registers at every start): SNS may have disabled it.
        endpoint = self._endpoints.create(platform, device_token)
        if (
            known is not None
            and (known.sub, known.device_token, known.endpoint) == (sub, device_token, endpoint)
            and known.platform == platform
        ):
            return known
        device = PushDevice(
            tenant_id, device_id, platform, device_token, sub, endpoint, self._clock_ms()
        )
        new = known is None
        try:
            self._devices.register(device, self._per_member, self._per_tenant, new=new)
        except TooManyDevices:
            # A bound reached with registrations of members the tenant no longer has:
            # they are swept, and the registration tried once more.
            if not new or not self.sweep(tenant_id, self._devices.devices(tenant_id)):
                raise
            self._devices.register(device, self._per_member, self._per_tenant, new=new)
        return device

    def sweep(self, tenant_id: str, devices: list[PushDevice]) -> list[str]:
        """Remove those of `devices` whose member the tenant (one of membership as data)
        no longer has, by its roster read now; their ids. Each removal is conditioned on
        the registration read (its member and instant), so one made again since stays.
        Their endpoints stay: SNS gives one endpoint per token, which the same phone's
        registration for another tenant may share (as `unregister`)."""
        if self._roster is None or not devices:
            return []
        roster = self._roster(tenant_id)
        if not roster.moved:
            return []
        removed = [
            d.device_id
            for d in devices
            if roster.access(d.sub).role is None
            and self._devices.remove(tenant_id, d.device_id, d.sub, d.registered_at_ms, former=True)
        ]
        if removed:
            logger.info("push devices of former members removed from %s: %s", tenant_id, removed)
        return removed

    def unregister(self, sub: str, tenant_id: str, device_id: str) -> bool:
        """Remove the caller's device; False if it has none of that id. Its endpoint
        stays: SNS gives one endpoint per token, which the same phone's registration
        for another tenant may share, and an unused endpoint costs nothing."""
        return self._devices.remove(tenant_id, device_id, sub)

    def mine(self, sub: str, tenant_id: str) -> list[PushDevice]:
        return sorted(
            (d for d in self._devices.devices(tenant_id) if d.sub == sub),
            key=lambda d: d.device_id,
        )

    def notify(
        self,
        tenant_id: str,
        token: str,
        writer: str | None = None,
        audience: Audience = None,
    ) -> PushRound:
        """Push `token` (or a newer one waiting) to every device of the tenant but
        `writer` (the device whose write made it) whose member is in `audience` (the
        principals whose view the change is in; None: every member; with UNTOLD, a
        catch-up's or changes coalesced: the others too, each only if its member's
        view has a change after the token last pushed to it, one read, and with that
        change's token): now if its window is over, else at the window's end
        (`flush`, at the round's `due_ms`)."""
        return self._round(tenant_id, token, writer, audience)

    def mark_empty(self, tenant_id: str) -> bool:
        """Say on the tenant's head that it has no device (a round found none), unless
        one was registered meanwhile: the stream's fan-out then runs no round for
        it until a registration."""
        return self._devices.mark_empty(tenant_id)

    def flush(self, tenant_id: str) -> PushRound:
        """Push the tokens waiting for their window's end, where it has passed."""
        return self._round(tenant_id, None, None, None)

    def _round(
        self,
        tenant_id: str,
        token: str | None,
        writer: str | None,
        audience: Audience,
    ) -> PushRound:
        done = PushRound()
        if not any(self._endpoints.enabled(p) for p in ("APNS", "FCM")):
            return done
        registered = self._devices.devices(tenant_id)
        done.devices = len(registered)
        candidates = [
            d
            for d in registered
            if d.device_id != writer
            and (to_check(audience) or in_audience(d.sub, audience))
            and (token is not None or d.pending is not None)
        ]
        members, roster = self._still_members(tenant_id, token, candidates)
        # A group's members by the roster read after the change (contract 3.12: as an
        # access read finds them), not by a read of each device's member's view.
        told = {
            d.device_id
            for d in members
            if in_audience(
                d.sub if roster is None else roster.access(d.sub).viewer(d.sub), audience
            )
        }
        devices = [(d, token) for d in members if d.device_id in told]
        if to_check(audience, groups_known=roster is not None):
            devices += self._views_changed(
                tenant_id, [d for d in members if d.device_id not in told]
            )
        if len(devices) <= 1:
            for device, its_token in devices:
                self._one(device, its_token, done)
            return done
        # Each device is a claim and a Publish, a network round trip each: 1,000 of
        # them one after the other took 13.8 s on the local engine.
        with ThreadPoolExecutor(min(PUSH_CONCURRENCY, len(devices))) as pool:
            list(pool.map(lambda pair: self._one(pair[0], pair[1], done), devices))
        return done

    def _still_members(
        self, tenant_id: str, token: str | None, devices: list[PushDevice]
    ) -> tuple[list[PushDevice], Roster | None]:
        """`devices` but those of members the tenant (one of membership as data) no
        longer has: their registrations stay, pushed nothing while they are not members;
        and the roster read (None: none)."""
        newest = max((t for t in (token, *(d.pending for d in devices)) if t), default=None)
        if self._members is None or newest is None:
            return devices, None
        # A flush pushes tokens that waited for a window: who is a member now, not the
        # roster kept for them (a removal since would be missed).
        if token is None and self._roster is not None:
            roster = self._roster(tenant_id)
        else:
            roster = self._members(tenant_id, newest)
        if not roster.moved:
            return devices, roster
        kept = [d for d in devices if roster.access(d.sub).role is not None]
        if len(kept) < len(devices):  # no longer members: their registrations go
            self.sweep(tenant_id, [d for d in devices if roster.access(d.sub).role is None])
        return kept, roster

    def _views_changed(
        self, tenant_id: str, devices: list[PushDevice]
    ) -> list[tuple[PushDevice, str]]:
        """Of UNTOLD `devices` (a catch-up's, or changes coalesced into one round),
        those whose member's view has a change after the token last pushed to the
        device (`latest_seen`, one read per member and token), each with that
        change's token: never the newer one the round was told, whose change it
        does not see (as the pokes' `_CheckedEvent`)."""
        if self._seen is None:
            return []
        found: dict[tuple[str, str | None], str | None] = {}
        for device in devices:
            key = (device.sub, device.pushed)
            if key not in found:
                found[key] = self._seen(tenant_id, device.pushed, device.sub)
        return [(d, seen) for d in devices if (seen := found[(d.sub, d.pushed)]) is not None]

    def _one(self, device: PushDevice, token: str | None, done: PushRound) -> None:
        newest = max((t for t in (token, device.pending) if t is not None), default=None)
        if newest is None or (device.pushed is not None and newest <= device.pushed):
            return
        now = self._clock_ms()
        due = device.pushed_at_ms + self.window_ms
        if now >= due and self._devices.claim(device, newest, now, self.window_ms):
            self._publish(device, newest, done)
        elif self._devices.defer(device, newest) or device.pending == newest:
            with done.lock:
                done.wait_until(max(due, now + 1))

    def _publish(self, device: PushDevice, token: str, done: PushRound) -> None:
        try:
            outcome = self._endpoints.publish(
                device.endpoint, device.platform, push_message(device.tenant_id, token)
            )
        except Unavailable:
            self._devices.release(device, token)
            with done.lock:
                done.failed += 1
                done.wait_until(self._clock_ms() + self.window_ms)
            return
        if outcome == "gone":
            logger.info(
                "push endpoint gone: device %s of %s removed", device.device_id, device.tenant_id
            )
            # Only the registration read: one made again since (a new token) stays.
            self._devices.remove(device.tenant_id, device.device_id, None, device.registered_at_ms)
            self._endpoints.delete(device.endpoint)
            with done.lock:
                done.removed.append(device.device_id)
            return
        logger.info(
            "silent push sent: tenant=%s device=%s platform=%s changeToken=%s",
            device.tenant_id,
            device.device_id,
            device.platform,
            token,
        )
        with done.lock:
            done.sent.append((device.device_id, token))
