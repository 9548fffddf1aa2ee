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

An object-valued field (an attachment, `Person.photo`) counts as plain while it is
null; an object that holds one goes the normal way, which signs its `url`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar

from graphql import (
    GraphQLLeafType,
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

# GraphQL type name -> {field name -> (attribute, leaf type, non-null)}; the leaf type
# is None for an object-valued field (plain only while null).
_FieldSpec = tuple[str, GraphQLLeafType | None, bool]
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
    """The fields of the named types, if every one of them is a plain leaf attribute."""
    plain: PlainFields = {}
    for name in type_names:
        graphql_type = schema._schema.type_map[name]
        assert isinstance(graphql_type, GraphQLObjectType)
        definition = schema.get_type_by_name(name)
        if not isinstance(definition, StrawberryObjectDefinition):
            continue
        fields = {}
        for field in definition.fields:
            graphql_name = schema.config.name_converter.get_graphql_name(field)
            field_type = graphql_type.fields[graphql_name].type
            nullable = get_nullable_type(field_type)
            non_null = isinstance(field_type, GraphQLNonNull)
            if (
                field.base_resolver is not None
                or field.extensions
                or field.permission_classes
                or field.arguments
                or not (is_leaf_type(nullable) or isinstance(nullable, GraphQLObjectType))
                or (non_null and not is_leaf_type(nullable))
            ):
                break
            leaf = nullable if is_leaf_type(nullable) else None
            fields[graphql_name] = (field.python_name, leaf, non_null)
        else:
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
            result = _complete_plain(fields, name, item, grouped_field_set)
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
            result = _complete_plain(fields, parent_type.name, source_value, grouped_field_set)
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
        attribute, leaf, non_null = spec
        value = getattr(source, attribute, Undefined)
        if value is None or value is Undefined:
            if non_null or value is Undefined:
                return None
            result[response_name] = None
            continue
        if leaf is None:
            return None  # an object: its own fields resolve the normal way
        try:
            coerced = leaf.coerce_output_value(value)
        except Exception:  # noqa: BLE001 - graphql-core reports it properly
            return None
        if coerced is None or coerced is Undefined:
            return None
        result[response_name] = coerced
    return result
