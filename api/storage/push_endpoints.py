"""SnsEndpoints: devices' platform endpoints in Amazon SNS Mobile Push, and the
silent pushes published to them (boto3's SNS client; locally, moto's server, the
engine that also serves S3). SNS speaks to APNs and FCM: nothing here does."""

from __future__ import annotations

import logging
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


class SnsEndpoints:
    """One SNS client and the platform applications' ARNs (APNS, FCM)."""

    def __init__(self, client: Any, applications: dict[str, str]) -> None:
        self._client = client  # a boto3 SNS client, or a LazyClient of one
        self._applications = applications

    def enabled(self, platform: str) -> bool:
        return bool(self._applications.get(platform))

    def create(self, platform: str, device_token: str) -> str:
        """The device's platform endpoint (CreatePlatformEndpoint: the same token gets
        the same endpoint back); BadUserInput when SNS refuses the token."""
        application = self._applications.get(platform)
        if not application:
            raise BadUserInput(f"pushes of platform {platform} are not configured on this server")
        try:
            answer = self._client.create_platform_endpoint(
                PlatformApplicationArn=application, Token=device_token
            )
        except ClientError as exc:
            if error_code(exc) == "InvalidParameter":
                raise BadUserInput("the push service refused this deviceToken") from exc
            raise _unavailable(exc) from exc
        except BotoCoreError as exc:
            raise _unavailable(exc) from exc
        return str(answer["EndpointArn"])

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
