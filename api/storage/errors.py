"""The store's one error boundary: PynamoDB and botocore exceptions become domain
errors (`api.domain.errors`) here, and nowhere else; nothing above the store sees
them. A cancelled transaction's reasons are read by `api.storage.transactions`."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from botocore.exceptions import BotoCoreError, ClientError
from pynamodb.exceptions import PynamoDBException, TransactWriteError

from api.domain.errors import Unavailable

# Error codes meaning "the store is busy or briefly unwell": the client may retry.
_RETRYABLE_CODES = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "RequestLimitExceeded",
        "InternalServerError",
        "ServiceUnavailable",
        "LimitExceededException",
        # A retry (same ClientRequestToken) met its own transaction still committing:
        # it may apply, so the service looks before answering (api.service.writing).
        "TransactionInProgressException",
        # S3's (the blob store, api.storage.blobs): throttled, or briefly unwell.
        "SlowDown",
        "RequestTimeout",
        "InternalError",
        "503",
        "500",
        "502",
        "504",
    }
)


@contextmanager
def translated() -> Iterator[None]:
    try:
        yield
    except TransactWriteError:
        raise  # handled with its cancellation reasons by the transaction writer
    except (PynamoDBException, BotoCoreError, ClientError) as exc:
        raise translate(exc) from exc


def translate(exc: Exception) -> Exception:
    if error_code(exc) in _RETRYABLE_CODES or isinstance(getattr(exc, "cause", exc), BotoCoreError):
        return Unavailable("the data store is busy or unreachable; retry later")
    return exc


def error_code(exc: Exception) -> str | None:
    # PynamoDB's own `cause_response_code` fails when the cause is a connection error.
    response = (
        getattr(exc, "response", None)
        or getattr(getattr(exc, "cause", None), "response", None)
        or {}
    )
    code = response.get("Error", {}).get("Code")
    return str(code) if code else None
