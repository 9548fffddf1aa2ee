"""Silent pushes (docs/realtime.md, "Silent pushes"): `registerPushDevice`,
`unregisterPushDevice` and `pushDevices`, the caller's own devices of a tenant."""

import enum
from datetime import UTC, datetime
from typing import Any

import strawberry

from api.domain.devices import PushDevice as Device
from api.domain.errors import Unavailable
from api.graphql.context import for_tenant
from api.graphql.directives import authenticated
from api.service import SyncService
from api.service.pushes import Pushes


@strawberry.enum(description="The push service of a device: Apple's or Firebase's.")
class PushPlatform(enum.Enum):
    APNS = "APNS"
    FCM = "FCM"


@strawberry.input
class RegisterPushDeviceInput:
    tenantID: strawberry.ID
    platform: PushPlatform
    deviceToken: str = strawberry.field(
        description="APNs: the device token in hex (64-200 digits); FCM: the "
        "registration token (32-4096 characters)."
    )
    deviceID: strawberry.ID = strawberry.field(
        description="The app's own id of this install (1-64 of [A-Za-z0-9_.:-]); send "
        "it as the `X-Device-ID` header of its writes, so that they push it nothing."
    )


@strawberry.type
class PushDevice:
    deviceID: strawberry.ID
    platform: PushPlatform
    registeredAt: datetime


def _device(device: Device) -> PushDevice:
    return PushDevice(
        deviceID=strawberry.ID(device.device_id),
        platform=PushPlatform(device.platform),
        registeredAt=datetime.fromtimestamp(device.registered_at_ms / 1000, UTC),
    )


def _pushes(service: SyncService) -> Pushes:
    """The service's pushes; asked inside `for_tenant`, so that a caller is first told
    whether it may use the tenant at all (UNAUTHENTICATED, FORBIDDEN)."""
    pushes: Pushes | None = service.pushes
    if pushes is None:
        raise Unavailable("silent pushes are not configured on this server")
    return pushes


async def register_push_device(info: strawberry.Info, input: RegisterPushDeviceInput) -> PushDevice:
    info.context.budget.spend_writes(1)
    sub = info.context.caller().sub
    device = await for_tenant(
        info,
        input.tenantID,
        lambda svc: _pushes(svc).register(
            sub, input.tenantID, input.platform.value, input.deviceToken, input.deviceID
        ),
    )
    return _device(device)


async def unregister_push_device(
    info: strawberry.Info, tenantID: strawberry.ID, deviceID: strawberry.ID
) -> bool:
    info.context.budget.spend_writes(1)
    sub = info.context.caller().sub
    return await for_tenant(
        info, tenantID, lambda svc: _pushes(svc).unregister(sub, tenantID, deviceID)
    )


async def push_devices(info: strawberry.Info, tenantID: strawberry.ID) -> list[PushDevice]:
    info.context.budget.spend_items(1)
    sub = info.context.caller().sub
    found = await for_tenant(info, tenantID, lambda svc: _pushes(svc).mine(sub, tenantID))
    return [_device(d) for d in found]


QUERIES: dict[str, Any] = {
    "pushDevices": strawberry.field(
        resolver=push_devices,
        description="The caller's own devices registered for the tenant's silent pushes.",
        **authenticated(),
    ),
}

MUTATIONS: dict[str, Any] = {
    "registerPushDevice": strawberry.mutation(
        resolver=register_push_device,
        description="Register the caller's device for the tenant's silent pushes (a "
        "data-free push carrying the tenant and its newest change token when another "
        "device writes). Again with the same deviceID: its token is replaced. Past the "
        "bounds per member and per tenant: QUOTA_EXCEEDED (reason PUSH_DEVICES).",
        **authenticated(),
    ),
    "unregisterPushDevice": strawberry.mutation(
        resolver=unregister_push_device,
        description="Stop the caller's device's silent pushes; false if it had none.",
        **authenticated(),
    ),
}
