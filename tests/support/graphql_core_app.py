"""The API answering with graphql-core's own execution, without the plain-record fast
path (api/graphql/execution.py): a server of it (`api_server(app=APP)`) answers what
the fast path must answer too (tests/integration/test_execution_kinds.py)."""

from __future__ import annotations

from typing import Any

from strawberry.schema.schema import StrawberryGraphQLCoreExecutionContext

APP = "tests.support.graphql_core_app:create_app"


def create_app(*args: Any, **kwargs: Any) -> Any:
    from api.app import create_app as create
    from api.graphql import schema

    schema.PlainRecordExecutionContext = StrawberryGraphQLCoreExecutionContext  # type: ignore[assignment,misc]
    schema.plain_record_fields = lambda *a: {}
    return create(*args, **kwargs)
