"""SnsEndpoints: devices' platform endpoints in Amazon SNS Mobile Push, and the
silent pushes published to them (boto3's SNS client; locally, moto's server, the
engine that also serves S3). SNS speaks to APNs and FCM: nothing here does."""

from __future__ import annotations

import logging
import re
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from api.domain.devices import APNS, APNS_ATTRIBUTES
from api.domain.errors import BadUserInput, Unavailable
from api.storage.errors import error_code

logger = logging.getLogger("api.pushes")

# The endpoint is gone for good: SNS disabled it (APNs or FCM said the token is
# invalid or unregistered: "EndpointDisabled"), or it was deleted ("NotFound").
_GONE = {"EndpointDisabled", "NotFound"}
SENT, GONE = "sent", "gone"
_EXISTING = re.compile(r"Endpoint (arn:\S+) already exists with the same [Tt]oken")


class SnsEndpoints:
    """One SNS client and the platform applications' ARNs (APNS, FCM)."""

    def __init__(self, client: Any, applications: dict[str, str]) -> None:
        self._client = client  # a boto3 SNS client, or a LazyClient of one
        self._applications = applications

    def enabled(self, platform: str) -> bool:
        return bool(self._applications.get(platform))

    def create(self, platform: str, device_token: str) -> str:
        """The device's platform endpoint, enabled (CreatePlatformEndpoint: the same
        token gets the same endpoint back, as it is; SNS disables an endpoint when
        APNs or FCM calls its token invalid, and "users can set it back to true,
        typically after updating Token": SetEndpointAttributes, AWS's SNS API
        reference). BadUserInput when SNS refuses the token."""
        application = self._applications.get(platform)
        if not application:
            raise BadUserInput(f"pushes of platform {platform} are not configured on this server")
        try:
            answer = self._client.create_platform_endpoint(
                PlatformApplicationArn=application, Token=device_token
            )
            endpoint = str(answer["EndpointArn"])
        except ClientError as exc:
            # The token's endpoint exists with other attributes (disabled, say): SNS
            # names it in the message, which is how AWS's guide to platform endpoints
            # finds it ("Endpoint <arn> already exists with the same Token...").
            existing = _EXISTING.search(str(exc.response.get("Error", {}).get("Message", "")))
            if error_code(exc) == "InvalidParameter" and existing is not None:
                endpoint = existing.group(1)
            elif error_code(exc) == "InvalidParameter":
                raise BadUserInput("the push service refused this deviceToken") from exc
            else:
                raise _unavailable(exc) from exc
        except BotoCoreError as exc:
            raise _unavailable(exc) from exc
        try:
            found = self._client.get_endpoint_attributes(EndpointArn=endpoint)["Attributes"]
            token = str(found.get("Token", ""))
            # SNS answers an APNs token in lowercase; FCM's are case-sensitive.
            same = token == device_token or (platform == APNS and token == device_token.lower())
            if not same or str(found.get("Enabled", "true")).lower() != "true":
                self._client.set_endpoint_attributes(
                    EndpointArn=endpoint, Attributes={"Token": device_token, "Enabled": "true"}
                )
        except (ClientError, BotoCoreError) as exc:
            raise _unavailable(exc) from exc
        return endpoint

    def publish(self, endpoint: str, platform: str, message: str) -> str:
        """Publish one silent push; SENT, or GONE when SNS reports the endpoint
        disabled or deleted. Unavailable otherwise (the caller retries)."""
        try:
            self._client.publish(
                TargetArn=endpoint,
                Message=message,
                MessageStructure="json",
                **({"MessageAttributes": APNS_ATTRIBUTES} if platform == APNS else {}),
            )
        except ClientError as exc:
            if error_code(exc) in _GONE:
                return GONE
            raise _unavailable(exc) from exc
        except BotoCoreError as exc:
            raise _unavailable(exc) from exc
        return SENT

    def delete(self, endpoint: str) -> None:
        """DeleteEndpoint (idempotent); a failure is logged, never raised: the
        registration is what pushes follow."""
        try:
            self._client.delete_endpoint(EndpointArn=endpoint)
        except (ClientError, BotoCoreError) as exc:
            logger.warning("DeleteEndpoint failed for %s: %s", endpoint, exc)


def _unavailable(exc: Exception) -> Unavailable:
    logger.warning("SNS call failed: %s", exc)
    return Unavailable("the push service is busy or unreachable; retry later")
