"""A faster path for the objects a `changes` page is made of.

graphql-core executes every field of every object on its own (resolve info,
resolver, completion): about 4 µs a field, 5 ms for a page of 100 people with 13
fields each, most of a page's time in Python. `Person`, `Reminder` and
`DeletedItem` are plain records: every field is a leaf read from an attribute,
with no resolver, argument, permission or extension. For such objects this
context reads and coerces the leaves directly, exactly as graphql-core would
complete them; anything it does not recognize, and every error, goes the normal
way, so results and errors are the same.

A list of such objects (`changes.items`) is completed in one loop as well:
graphql-core's per-item steps (abstract type resolution, `is_type_of`, the
memoized sub-selection lookup) cost about as much again as the fields.

A list of leaves or of plain objects (a LIST field of the catalog: `Task.counts`,
`Task.checklist`) is completed in one loop too, each item coerced as graphql-core
would; an OBJECT field's type (`TaskAddress`) is plain like the record's. A page of
100 tasks at their kinds' bounds holds some 60,000 list items: through
graphql-core's per-item path they took most of the page's time.

An object-valued field (an attachment, `Person.photo`) is completed the same way
when its own type is plain for the fields selected: `Attachment`'s leaves are, its
`url` has a resolver (it signs a link), so a selection of `url` goes the normal way.
A type's fields with resolvers, arguments, permissions or extensions are left out
of its plain fields: selecting one sends the object the normal way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, ClassVar

from graphql import (
    GraphQLLeafType,
    GraphQLList,
    GraphQLNonNull,
    GraphQLNullableType,
    GraphQLObjectType,
    GraphQLOutputType,
    GraphQLResolveInfo,
    get_nullable_type,
    is_abstract_type,
    is_leaf_type,
)
from graphql.execution.collect_fields import FieldDetailsList, GroupedFieldSet
from graphql.pyutils import AwaitableOrValue, Path, Undefined
from strawberry.schema.schema import Schema, StrawberryGraphQLCoreExecutionContext
from strawberry.types.base import StrawberryObjectDefinition

# The overrides below are of graphql-core 3.3's `Executor` methods, which are not
# documented for overriding: pyproject.toml pins the graphql-core range they were
# tested with, and tests/integration/test_execution.py proves the results equal
# graphql-core's own for every selection of the plain types.

# GraphQL type name -> {field name -> (attribute, leaf type, non-null, object type,
# list)}; for an object-valued field, the leaf type is None and the object type names
# it; `list`: the field is a list of them (`[X!]`, a LIST field of the catalog).
_FieldSpec = tuple[str, GraphQLLeafType | None, bool, str | None, bool]
PlainFields = dict[str, dict[str, _FieldSpec]]


# A plain type's plan for one list: its name, field specs and sub-selection.
_Plan = tuple[str, dict[str, _FieldSpec], GroupedFieldSet]


def plain_record_classes(schema: Schema, plain: PlainFields) -> dict[type, str]:
    """Python class -> GraphQL type name, for the plain types."""
    classes: dict[type, str] = {}
    for name in plain:
        definition = schema.get_type_by_name(name)
        assert isinstance(definition, StrawberryObjectDefinition)
        classes[definition.origin] = name
    return classes


def plain_record_fields(schema: Schema, type_names: list[str]) -> PlainFields:
    """The plain fields of the named types: leaf attributes, and nullable attributes
    holding an object of one of the named types."""
    plain: PlainFields = {}
    for name in type_names:
        graphql_type = schema._schema.type_map[name]
        assert isinstance(graphql_type, GraphQLObjectType)
        definition = schema.get_type_by_name(name)
        if not isinstance(definition, StrawberryObjectDefinition):
            continue
        fields: dict[str, _FieldSpec] = {}
        for field in definition.fields:
            graphql_name = schema.config.name_converter.get_graphql_name(field)
            if graphql_name not in graphql_type.fields:
                continue  # private: not in the schema
            field_type = graphql_type.fields[graphql_name].type
            nullable = get_nullable_type(field_type)
            non_null = isinstance(field_type, GraphQLNonNull)
            if (
                field.base_resolver is not None
                or field.extensions
                or field.permission_classes
                or field.arguments
            ):
                continue  # resolved the normal way when selected
            listed = isinstance(nullable, GraphQLList) and isinstance(
                nullable.of_type, GraphQLNonNull
            )
            item = nullable.of_type.of_type if listed else nullable
            if is_leaf_type(item):
                fields[graphql_name] = (field.python_name, item, non_null, None, listed)
            elif (
                isinstance(item, GraphQLObjectType)
                and item.name in type_names
                and (listed or not non_null)
            ):
                fields[graphql_name] = (field.python_name, None, non_null, item.name, listed)
        plain[name] = fields
    return plain


class PlainRecordExecutionContext(StrawberryGraphQLCoreExecutionContext):
    plain_fields: ClassVar[PlainFields] = {}
    plain_classes: ClassVar[dict[type, str]] = {}

    def complete_iterable_value(
        self,
        item_type: GraphQLOutputType,
        field_details_list: FieldDetailsList,
        info: GraphQLResolveInfo,
        path: Path,
        items: Iterable[Any],
        position_context: Any,
    ) -> AwaitableOrValue[list[Any]]:
        if position_context is None and isinstance(items, list):
            completed = self._complete_plain_list(item_type, field_details_list, path, items)
            if completed is not None:
                return completed
        return super().complete_iterable_value(
            item_type, field_details_list, info, path, items, position_context
        )

    def _complete_plain_list(
        self,
        item_type: GraphQLOutputType,
        field_details_list: FieldDetailsList,
        path: Path,
        items: list[Any],
    ) -> list[Any] | None:
        """The completed list, or None to let graphql-core do it (and report any error)."""
        if self.get_stream_usage(field_details_list, path) is not None:
            return None
        expected = get_nullable_type(item_type)
        # Per Python class: its type name, field specs and sub-selection, found once.
        plans: dict[type, _Plan | None] = {}
        completed = []
        for item in items:
            cls = type(item)
            if cls not in plans:
                plans[cls] = self._plain_plan(cls, expected, field_details_list)
            plan = plans[cls]
            if plan is None:
                return None
            name, fields, grouped_field_set = plan
            result = _complete_plain(fields, name, item, grouped_field_set, self._nested)
            if result is None:
                return None
            completed.append(result)
        return completed

    def _plain_plan(
        self, cls: type, expected: GraphQLNullableType, field_details_list: FieldDetailsList
    ) -> _Plan | None:
        """How to complete items of `cls` in this list, or None if it is not a plain
        record type valid here (or its selection defers)."""
        name = self.plain_classes.get(cls)
        if name is None:
            return None
        runtime_type = self.schema.get_type(name)
        if not isinstance(runtime_type, GraphQLObjectType):
            return None
        if runtime_type is not expected and not (
            is_abstract_type(expected) and self.schema.is_sub_type(expected, runtime_type)
        ):
            return None
        grouped_field_set, new_defer_usages, _ = self.collect_subfields(
            runtime_type, field_details_list
        )
        if new_defer_usages:
            return None
        return name, self.plain_fields[name], grouped_field_set

    def _nested(
        self, type_name: str, value: object, field_details_list: FieldDetailsList
    ) -> dict[str, Any] | None:
        """An object-valued field's object completed, or None to go the normal way."""
        if self.plain_classes.get(type(value)) != type_name:
            return None
        runtime_type = self.schema.get_type(type_name)
        assert isinstance(runtime_type, GraphQLObjectType)
        grouped_field_set, new_defer_usages, _ = self.collect_subfields(
            runtime_type, field_details_list
        )
        if new_defer_usages:
            return None
        fields = self.plain_fields[type_name]
        return _complete_plain(fields, type_name, value, grouped_field_set, self._nested)

    def execute_fields(
        self,
        parent_type: GraphQLObjectType,
        source_value: Any,
        path: Path | None,
        grouped_field_set: GroupedFieldSet,
        position_context: Any,
    ) -> AwaitableOrValue[dict[str, Any]]:
        fields = self.plain_fields.get(parent_type.name)
        if fields is not None:
            result = _complete_plain(
                fields, parent_type.name, source_value, grouped_field_set, self._nested
            )
            if result is not None:
                return result
        return super().execute_fields(
            parent_type, source_value, path, grouped_field_set, position_context
        )


def _complete_plain(
    fields: dict[str, _FieldSpec],
    type_name: str,
    source: object,
    grouped_field_set: GroupedFieldSet,
    nested: Callable[[str, object, FieldDetailsList], dict[str, Any] | None],
) -> dict[str, Any] | None:
    """The completed object, or None to let graphql-core do it (and report any error)."""
    result: dict[str, Any] = {}
    for response_name, field_details_list in grouped_field_set.items():
        field_name = field_details_list[0].node.name.value
        if field_name == "__typename":
            result[response_name] = type_name
            continue
        spec = fields.get(field_name)
        if spec is None:
            return None
        attribute, leaf, non_null, object_type, listed = spec
        value = getattr(source, attribute, Undefined)
        if value is None or value is Undefined:
            if non_null or value is Undefined:
                return None
            result[response_name] = None
            continue
        if listed:
            items = _complete_items(leaf, object_type, value, field_details_list, nested)
            if items is None:
                return None
            result[response_name] = items
            continue
        if object_type is not None:
            completed = nested(object_type, value, field_details_list)
            if completed is None:
                return None
            result[response_name] = completed
            continue
        assert leaf is not None
        try:
            coerced = leaf.coerce_output_value(value)
        except Exception:  # noqa: BLE001 - graphql-core reports it properly
            return None
        if coerced is None or coerced is Undefined:
            return None
        result[response_name] = coerced
    return result


def _complete_items(
    leaf: GraphQLLeafType | None,
    object_type: str | None,
    values: object,
    field_details_list: FieldDetailsList,
    nested: Callable[[str, object, FieldDetailsList], dict[str, Any] | None],
) -> list[Any] | None:
    """A list of non-null leaves or plain objects completed, or None to let
    graphql-core do it (a null item, a value it cannot coerce: it reports them)."""
    if not isinstance(values, list):
        return None
    completed: list[Any] = []
    if object_type is not None:
        for value in values:
            item = None if value is None else nested(object_type, value, field_details_list)
            if item is None:
                return None
            completed.append(item)
        return completed
    assert leaf is not None
    coerce = leaf.coerce_output_value
    try:
        for value in values:
            coerced = None if value is None else coerce(value)
            if coerced is None or coerced is Undefined:
                return None
            completed.append(coerced)
    except Exception:  # noqa: BLE001 - graphql-core reports it properly
        return None
    return completed
