"""SNS Mobile Push on the local engine (moto's server, the one that serves S3 in
the tests and `scripts/serve`): platform applications, and what was published to
each endpoint, read back from the server's own model data (`/moto-api/data.json`)."""

from __future__ import annotations

import dataclasses
import json
import urllib.request
from typing import Any

from api.settings import Settings
from scripts.local_s3 import ensure_push_applications


def push_settings(settings: Settings, engine_url: str, **changes: Any) -> Settings:
    """`settings` with pushes on through the SNS of the local engine at `engine_url`
    (its platform applications made), a window of 60 s, and `changes` over that."""
    local = dataclasses.replace(settings, sns_endpoint=engine_url)
    arns = applications(local.sns_client())
    return dataclasses.replace(
        local,
        push_apns_application_arn=arns["APNS"],
        push_fcm_application_arn=arns["FCM"],
        push_window_seconds=60.0,
        **changes,
    )


def applications(client: Any) -> dict[str, str]:
    """The APNS and FCM platform applications (made once; the same ARNs after)."""
    return ensure_push_applications(client)


def published(endpoint_url: str) -> dict[str, list[dict[str, Any]]]:
    """Endpoint ARN -> the messages published to it (each the JSON SNS was given)."""
    with urllib.request.urlopen(f"{endpoint_url}/moto-api/data.json", timeout=10) as answer:
        data = json.load(answer)
    found: dict[str, list[dict[str, Any]]] = {}
    for endpoint in data.get("sns", {}).get("PlatformEndpoint", []):
        found[endpoint["arn"]] = [json.loads(m) for m in endpoint.get("messages", {}).values()]
    return found


def payload(message: dict[str, Any], platform: str = "APNS") -> dict[str, Any]:
    """What the device gets: APNs' JSON, or FCM's data."""
    if platform == "APNS":
        body: dict[str, Any] = json.loads(message["APNS"])
        return body
    fcm: dict[str, Any] = json.loads(message["GCM"])["fcmV1Message"]["message"]
    return fcm
