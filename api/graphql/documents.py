"""Parsing and validation of GraphQL documents, at a bounded cost.

Apps send the same few operations again and again, so each distinct document is
parsed and validated once and kept, but only once it validated and only for an
authenticated caller, and within a byte budget: before, 210 different ~1 MB
documents that failed validation grew a process by 400 MB for good.

Validation's cost grows with the square of the fragments spread on one selection
(550 spreads: 0.45-0.8 s; 20: 7 ms, measured here), and with the number of
fields; both are counted on the parsed document, which is linear, and a document
over the limits is refused before it is validated.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from threading import Lock

from graphql import DocumentNode, GraphQLError, IntValueNode
from graphql.language import Visitor, visit
from strawberry.extensions import SchemaExtension
from strawberry.schema.schema import validate_document

# Integer literals longer than this are refused (Int is 32 bits: 11 characters
# at most); Python's message for very long ones names its own internals.
MAX_INT_LITERAL = 20
# Well above the app's own operations (a full `changes` selection is ~60 fields,
# GraphiQL's introspection query ~110 fields and 3 fragment spreads).
MAX_FIELDS = 500
MAX_FRAGMENTS = 30
# A document longer than this is refused before it is parsed; an anonymous
# caller (no valid token) gets less: enough for GraphiQL's introspection (~2 KB).
MAX_DOCUMENT = 64 * 1024
MAX_ANONYMOUS_DOCUMENT = 8 * 1024
# The cache keeps documents of at most this many characters, this many in all.
MAX_CACHED_DOCUMENT = 16 * 1024
CACHE_BUDGET = 512 * 1024


class ValidDocuments:
    """Documents that validated, by their text; least recently used evicted first,
    bounded by the total length of their texts (their syntax trees are about 20x)."""

    def __init__(self, budget: int = CACHE_BUDGET, max_document: int = MAX_CACHED_DOCUMENT) -> None:
        self._budget = budget
        self._max_document = max_document
        self._used = 0
        self._documents: OrderedDict[str, DocumentNode] = OrderedDict()
        self._lock = Lock()

    @property
    def used(self) -> int:
        return self._used

    def get(self, query: str) -> DocumentNode | None:
        with self._lock:
            document = self._documents.get(query)
            if document is not None:
                self._documents.move_to_end(query)
            return document

    def put(self, query: str, document: DocumentNode) -> None:
        if len(query) > self._max_document:
            return
        with self._lock:
            if query in self._documents:
                return
            self._documents[query] = document
            self._used += len(query)
            while self._used > self._budget:
                evicted, _ = self._documents.popitem(last=False)
                self._used -= len(evicted)


class _Counter(Visitor):
    def __init__(self) -> None:
        super().__init__()
        self.fields = 0
        self.fragments = 0
        self.long_ints = 0

    def enter_field(self, *_: object) -> None:
        self.fields += 1

    def enter_fragment_spread(self, *_: object) -> None:
        self.fragments += 1

    def enter_inline_fragment(self, *_: object) -> None:
        self.fragments += 1

    def enter_int_value(self, node: IntValueNode, *_: object) -> None:
        if len(node.value) > MAX_INT_LITERAL:
            self.long_ints += 1


def too_long(query: str, authenticated: bool) -> GraphQLError | None:
    """The error for a document too long to parse for this caller, or None."""
    limit = MAX_DOCUMENT if authenticated else MAX_ANONYMOUS_DOCUMENT
    if len(query) <= limit:
        return None
    if authenticated:
        return GraphQLError(
            f"the document is longer than {limit} characters",
            extensions={"code": "BAD_USER_INPUT"},
        )
    return GraphQLError(
        f"send Authorization: Bearer <token> (without it, documents are limited to "
        f"{limit} characters)",
        extensions={"code": "UNAUTHENTICATED"},
    )


def too_costly(document: DocumentNode) -> str | None:
    """Why validating `document` would cost too much, or None."""
    counter = _Counter()
    visit(document, counter)
    if counter.fields > MAX_FIELDS:
        return f"the operation selects {counter.fields} fields, at most {MAX_FIELDS}"
    if counter.fragments > MAX_FRAGMENTS:
        return f"the operation has {counter.fragments} fragments, at most {MAX_FRAGMENTS}"
    if counter.long_ints:
        return f"integer literals have at most {MAX_INT_LITERAL} digits"
    return None


class BoundedDocuments(SchemaExtension):
    """Replaces Strawberry's ParserCache and ValidationCache (count-bounded, of any
    size, keyed with the operation name, and caching failures too)."""

    def __init__(self, *, cache: ValidDocuments) -> None:
        super().__init__()
        self._cache = cache
        self._cached = False

    def on_parse(self) -> Iterator[None]:
        context = self.execution_context
        if context.graphql_document is None and context.query is not None:
            document = self._cache.get(context.query)
            if document is not None:
                context.graphql_document = document
                self._cached = True
        yield

    def on_validate(self) -> Iterator[None]:
        context = self.execution_context
        document = context.graphql_document
        if self._cached:
            context.pre_execution_errors = []
        elif document is not None:
            reason = too_costly(document)
            if reason is not None:
                error = GraphQLError(reason, extensions={"code": "BAD_USER_INPUT"})
                context.pre_execution_errors = [error]
            else:
                errors = validate_document(
                    context.schema._schema, document, context.validation_rules
                )
                context.pre_execution_errors = errors
                authenticated = getattr(context.context, "principal", None) is not None
                if not errors and authenticated and context.query is not None:
                    self._cache.put(context.query, document)
        yield
