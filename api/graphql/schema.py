"""The served schema, assembled: each capability's fields come from its own
module (`changes`, `entities`, `push`, `history`, `attachments`, `tenancy`,
`exports`, `subscription`), in the order the schema file lists them; the limits
every request is held to are set here."""

import logging
from collections.abc import Iterable, Iterator
from typing import Any

import strawberry
from graphql import DocumentNode, FieldNode, GraphQLError, get_operation_ast
from strawberry.extensions import DisableIntrospection, MaxAliasesLimiter, QueryDepthLimiter
from strawberry.schema.config import StrawberryConfig
from strawberry.schema.schema import DEFAULT_ALLOWED_OPERATION_TYPES
from strawberry.types.execution import ExecutionContext, ExecutionResult
from strawberry.types.graphql import OperationType

from api import metrics, request_log
from api.graphql import (
    attachments,
    changes,
    devices,
    entities,
    exports,
    history,
    push,
    tenancy,
    upgrades,
    visibility,
)
from api.graphql.documents import BoundedDocuments, ValidDocuments
from api.graphql.errors import with_codes
from api.graphql.execution import (
    PlainRecordExecutionContext,
    plain_record_classes,
    plain_record_fields,
)
from api.graphql.field_types import object_type_name
from api.graphql.scalars import SCALAR_MAP
from api.graphql.subscription import subscription_fields
from api.graphql.types import ITEM_TYPE_SCHEMAS, LeftViewItem
from api.settings import Settings

logger = logging.getLogger("api.graphql")


def _root(name: str, fields: dict[str, Any]) -> Any:
    namespace: dict[str, Any] = {"__module__": __name__, **fields}
    return strawberry.type(type(name, (), namespace))


Query = _root(
    "Query",
    {
        **changes.QUERIES,
        **upgrades.QUERIES,
        **history.QUERIES,
        **attachments.QUERIES,
        **entities.QUERIES,
        **devices.QUERIES,
    },
)
Mutation = _root(
    "Mutation",
    {
        **entities.MUTATIONS,
        **history.MUTATIONS,
        **tenancy.MUTATIONS,
        **exports.MUTATIONS,
        **attachments.MUTATIONS,
        **push.MUTATIONS,
        **visibility.MUTATIONS,
        **devices.MUTATIONS,
    },
)
Subscription = _root("Subscription", subscription_fields())


class SyncSchema(strawberry.Schema):
    documents: ValidDocuments  # the parsed documents this schema keeps (bounded)

    async def execute(
        self,
        query: str | None,
        variable_values: dict[str, Any] | None = None,
        context_value: Any | None = None,
        root_value: Any | None = None,
        operation_name: str | None = None,
        allowed_operation_types: Iterable[OperationType] | None = None,
        operation_extensions: dict[str, Any] | None = None,
    ) -> ExecutionResult:
        """As Strawberry's, never for a subscription: `execute` runs queries and
        mutations (over HTTP and WebSocket alike); a subscription over HTTP is then
        refused before it runs (`api.app`: 400, BAD_USER_INPUT), where Strawberry
        would fail inside it."""
        allowed = set(allowed_operation_types or DEFAULT_ALLOWED_OPERATION_TYPES)
        return await super().execute(
            query,
            variable_values,
            context_value,
            root_value,
            operation_name,
            allowed - {OperationType.SUBSCRIPTION},
            operation_extensions,
        )

    def _warn_for_federation_directives(self) -> None:
        # Strawberry's check that no federation directive is used imports
        # strawberry.federation's directives to ask, some 10-20 ms of a cold start
        # (docs/cold-start.md); this schema is not federated and uses none.
        return

    def process_errors(
        self, errors: list[GraphQLError], execution_context: ExecutionContext | None = None
    ) -> None:
        # Strawberry logs a traceback for every error. Expected errors (conflicts, bad
        # input, auth) are already in the request's log line with their code, and
        # unexpected ones were logged with their traceback by ErrorCodes. Errors of
        # a subscription (over WebSocket) get their codes here: no HTTP view sees them.
        errors[:] = with_codes(errors)
        for error in errors:
            logger.debug("graphql error at %s: %s", error.path, error.message)


class _Operation(BoundedDocuments):
    """What the schema adds to each operation, in one extension: Strawberry looks
    for each extension's hook at each of an operation's four steps and enters it;
    as five extensions (one each) a poll took 154,000 more instructions (5.65
    million against 5.49, cachegrind; the same DynamoDB call behind a bare route
    takes 3.88). Each request its limits: the parser's token count and the added
    validation rules; the document cache (`BoundedDocuments`); the operation's name
    in the request's log line; the error codes of what ran (errors raised before
    can bypass extensions: the HTTP view codes those)."""

    def __init__(
        self, *, cache: ValidDocuments, rules: tuple[type[Any], ...], max_tokens: int
    ) -> None:
        super().__init__(cache=cache)
        self._rules = rules
        self._max_tokens = max_tokens

    def on_operation(self) -> Iterator[None]:
        context = self.execution_context
        context.parse_options["max_tokens"] = self._max_tokens
        context.validation_rules = context.validation_rules + self._rules
        yield
        result = context.result
        if result is not None and result.errors:
            result.errors = with_codes(result.errors)

    def on_execute(self) -> Iterator[None]:
        log = request_log.current()
        if log is not None:
            context = self.execution_context
            log.operation = context.operation_name or (
                context.operation_type.value if context.operation_type else None
            )
            log.root_field = _root_field(context.graphql_document, context.operation_name)
        yield


def _root_field(document: DocumentNode | None, name: str | None) -> str | None:
    """The root field a validated document's operation selects (the schema's, so a
    closed set: `api.metrics`), "multiple" for several; introspection's own fields
    (`__typename`, `__schema`) are left out."""
    operation = None if document is None else get_operation_ast(document, name)
    if operation is None:
        return None
    fields = {
        s.name.value
        for s in operation.selection_set.selections
        if isinstance(s, FieldNode) and not s.name.value.startswith("__")
    }
    if len(fields) > 1:
        return metrics.MULTIPLE
    return next(iter(fields), None)


def make_schema(settings: Settings) -> SyncSchema:
    """The served schema: the same types whatever the settings, with the request limits."""
    # The limit rules are made once: the validation cache is keyed by the rule
    # classes too, and the limiters make new ones on every instantiation.
    documents = ValidDocuments()
    limit_rules = (
        *QueryDepthLimiter(max_depth=settings.max_query_depth).validation_rules,
        *MaxAliasesLimiter(max_alias_count=settings.max_aliases).validation_rules,
    )
    extensions: list[Any] = [
        # Apps send the same few operations again and again: each distinct document
        # is parsed and validated once (validation was most of a small request's
        # time), within bounds (`api.graphql.documents`).
        lambda: _Operation(
            cache=documents, rules=limit_rules, max_tokens=settings.max_query_tokens
        ),
    ]
    if not settings.introspection:
        extensions.append(DisableIntrospection)
    context_class: Any = type("RecordExecutionContext", (PlainRecordExecutionContext,), {})
    schema = SyncSchema(
        query=Query,
        mutation=Mutation,
        subscription=Subscription,
        types=[*(s.object_type for s in ITEM_TYPE_SCHEMAS), LeftViewItem],
        extensions=extensions,
        # The schema's names are written as GraphQL spells them (schema.graphql is
        # the same either way): no camel-casing of every argument on every request.
        config=StrawberryConfig(scalar_map=SCALAR_MAP, auto_camel_case=False),
        execution_context_class=context_class,
    )
    schema.documents = documents
    record_types = [s.item_type.name for s in ITEM_TYPE_SCHEMAS] + [
        "DeletedItem",
        "LeftViewItem",
        "Attachment",
        "Visibility",
        # OBJECT fields' types (TaskAddress): plain, as the records that hold them.
        *(
            object_type_name(s.item_type.name, f)
            for s in ITEM_TYPE_SCHEMAS
            for f in s.item_type.fields
            if f.fields
        ),
    ]
    context_class.plain_fields = plain_record_fields(schema, record_types)
    context_class.plain_classes = plain_record_classes(schema, context_class.plain_fields)
    return schema


def default_schema() -> SyncSchema:
    """The schema with default settings: what `scripts/export-schema` prints into
    schema.graphql (Strawberry's CLI calls it). Nothing is built at import."""
    return make_schema(Settings())
