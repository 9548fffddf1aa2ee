"""Devices registered for silent pushes (docs/realtime.md, "Silent pushes"): what a
registration holds, its checks, and the one payload a push carries."""

from __future__ import annotations

import json
import re
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from api.domain.errors import BadUserInput
from api.domain.identifiers import check_identifier

APNS = "APNS"
FCM = "FCM"
PLATFORMS = (APNS, FCM)

# An APNs device token is 32 bytes, sent as 64 hex digits; Apple says its length may
# grow, so up to 200 hex digits. An FCM registration token is some 150-200 characters
# of letters, digits, '_', '-' and ':'; up to 4,096 (the bound of the field).
_APNS_TOKEN = re.compile(r"^[0-9A-Fa-f]{64,200}$")
_FCM_TOKEN = re.compile(r"^[A-Za-z0-9_:\-.]{32,4096}$")

# The device a request writes from (its `X-Device-ID` header, when a valid id): the
# writes it commits carry it (on the head), and no silent push of them goes to it.
WRITER_DEVICE: ContextVar[str | None] = ContextVar("writer_device", default=None)
DEVICE_HEADER = "x-device-id"


@dataclass(frozen=True)
class PushDevice:
    """One device of one member, registered for one tenant's silent pushes."""

    tenant_id: str
    device_id: str
    platform: str
    device_token: str
    sub: str  # the member who registered it
    endpoint: str  # its SNS platform endpoint's ARN
    registered_at_ms: int
    # The token last pushed to it (None: none yet), when (epoch ms), and a newer one
    # waiting for the end of its window (None: none).
    pushed: str | None = None
    pushed_at_ms: int = 0
    pending: str | None = None


def check_registration(tenant_id: str, platform: str, device_token: str, device_id: str) -> None:
    """BadUserInput unless the tenant, platform, token and device id are well formed."""
    check_identifier(tenant_id, "tenantID")
    check_identifier(device_id, "deviceID")
    if platform not in PLATFORMS:
        raise BadUserInput(f"platform must be one of {', '.join(PLATFORMS)}")
    pattern = _APNS_TOKEN if platform == APNS else _FCM_TOKEN
    if not isinstance(device_token, str) or not pattern.fullmatch(device_token):
        what = (
            "64-200 hexadecimal digits"
            if platform == APNS
            else "32-4096 characters of letters, digits, '_', '-', ':' or '.'"
        )
        raise BadUserInput(f"deviceToken of platform {platform} must be {what}")


def push_message(tenant_id: str, change_token: str) -> str:
    """The SNS message (MessageStructure=json) of a silent push: the tenant and its
    newest change token, nothing else. APNs: `content-available` alone in `aps` (a
    background notification has no alert, badge or sound); FCM (HTTP v1 through
    SNS's `fcmV1Message`): a data-only message at normal priority."""
    data = {"tenantID": tenant_id, "changeToken": change_token}
    apns = json.dumps({"aps": {"content-available": 1}, **data})
    fcm = json.dumps(
        {"fcmV1Message": {"message": {"data": data, "android": {"priority": "NORMAL"}}}}
    )
    return json.dumps({"default": json.dumps(data), "APNS": apns, "APNS_SANDBOX": apns, "GCM": fcm})


# SNS's message attributes for APNs (the apns-push-type and apns-priority headers):
# a background push must be sent at priority 5 (Apple: "Pushing background updates to
# your App"). FCM ignores them.
APNS_ATTRIBUTES: dict[str, Any] = {
    "AWS.SNS.MOBILE.APNS.PUSH_TYPE": {"DataType": "String", "StringValue": "background"},
    "AWS.SNS.MOBILE.APNS.PRIORITY": {"DataType": "String", "StringValue": "5"},
}
