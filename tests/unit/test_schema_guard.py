"""The schema guard: hostile agent-written schemas are refused at load, validation is bounded."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.errors import InvalidInput
from runtime.tools.schema_guard import (
    SchemaLimits,
    UnsafeSchema,
    ValidationBudgetExceeded,
    check_instance_shape,
    check_schema_cost,
    validate_instance,
)
from runtime.tools.user.descriptor import (
    ToolLoadError,
    check_parameters_schema,
    parse_descriptor,
)


def chain(depth: int) -> dict[str, Any]:
    """`a_i: {allOf: [{$ref: a_i+1}, {$ref: a_i+1}]}`: 2^depth subschemas once expanded."""
    defs: dict[str, Any] = {
        f"a{i}": {"allOf": [{"$ref": f"#/$defs/a{i + 1}"}, {"$ref": f"#/$defs/a{i + 1}"}]}
        for i in range(depth)
    }
    defs[f"a{depth}"] = {"type": "string"}
    return {"type": "object", "properties": {"x": {"$ref": "#/$defs/a0"}}, "$defs": defs}


def obj(**props: Any) -> dict[str, Any]:
    return {"type": "object", "properties": props}


@pytest.mark.parametrize("depth", [16, 20, 24, 40])
def test_exponential_defs_chain_is_refused_at_once(depth: int) -> None:
    schema = chain(depth)
    assert len(json.dumps(schema)) < 4096
    start = time.thread_time()
    with pytest.raises(UnsafeSchema, match="expands to more than 2000|nests deeper than 48"):
        check_schema_cost(schema)
    assert time.thread_time() - start < 0.1


def test_a_short_chain_is_fine_and_validates() -> None:
    check_schema_cost(chain(4))
    assert validate_instance(chain(4), {"x": "ok"}) == []
    assert validate_instance(chain(4), {"x": 1})[0].startswith("x: 1 is not of type")


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "$ref": "#"},
        {"type": "object", "allOf": [{"$ref": "#"}]},
        obj(x={"$ref": "#"}),
        {"type": "object", "$ref": "#/$defs/a",
         "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"anyOf": [{"$ref": "#/$defs/a"}]}}},
        obj(x={"items": {"$ref": "#/properties/x"}}),
    ],
    ids=["root", "allOf", "via-property", "two-step", "self-items"],
)
def test_ref_cycles_are_refused(schema: dict[str, Any]) -> None:
    with pytest.raises(UnsafeSchema, match="recursive schemas are not allowed"):
        check_schema_cost(schema)


def test_shared_non_recursive_refs_are_fine() -> None:
    schema = {"type": "object", "$defs": {"n": {"type": "integer", "minimum": 0}},
              "properties": {"a": {"$ref": "#/$defs/n"}, "b": {"$ref": "#/$defs/n"},
                             "c": {"type": "array", "items": {"$ref": "#/$defs/n"}}}}
    check_schema_cost(schema)
    assert validate_instance(schema, {"a": 1, "b": 2, "c": [3]}) == []
    assert len(validate_instance(schema, {"a": -1, "c": [-2]})) == 2


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        (obj(x={"type": "string", "pattern": "^(a+)+$"}), "'pattern' is not allowed"),
        ({"type": "object", "patternProperties": {"^a": {}}}, "'patternProperties'"),
        (obj(x={"propertyNames": {"pattern": "a"}}), "'pattern'"),
        ({"type": "object", "unevaluatedProperties": False}, "unevaluatedProperties"),
        (obj(x={"$ref": "https://example.org/s.json"}), "only local"),
        (obj(x={"$ref": "other.json#/a"}), "only local"),
        (obj(x={"$id": "https://evil.example/", "$ref": "#/a"}), "'\\$id'"),
        (obj(x={"$dynamicRef": "#meta"}), "dynamicRef"),
        (obj(x={"$anchor": "a"}), "anchor"),
        (obj(x={"$ref": "#/$defs/missing"}), "points at nothing"),
        ({"type": "object", "required": ["x"], "properties": {"x": {"$ref": "#/required"}}},
         "points outside"),
        ({**obj(x={"$ref": "#/$defs"}), "$defs": {}}, "does not point at a schema"),
        (obj(x={"$ref": "#/type"}), "points outside"),
        (obj(x={"$ref": "#/properties"}), "does not point at a schema"),
        # a $ref into data: its target was never checked as a schema
        ({"type": "object", "default": {"pattern": "(a+)+$"}, "$ref": "#/default"},
         "points outside the schema's subschemas"),
        ({"type": "object", "default": {"type": 5}, "$ref": "#/default"}, "points outside"),
        ({"type": "object", "x-mine": {}, "$ref": "#/x-mine"}, "points outside"),
    ],
)
def test_unsafe_keywords_are_refused(schema: dict[str, Any], message: str) -> None:
    with pytest.raises(UnsafeSchema, match=message):
        check_schema_cost(schema)


def test_names_and_data_are_not_keywords() -> None:
    check_schema_cost(obj(pattern={"type": "string"}, **{"$id": {"type": "string"}}))
    check_schema_cost({"type": "object", "default": {"pattern": "x"},
                       "enum": [{"$ref": "http://x"}], "examples": [{"$id": 1}]})


def test_document_bounds() -> None:
    deep: dict[str, Any] = {"type": "string"}
    for _ in range(40):
        deep = {"not": deep}
    with pytest.raises(UnsafeSchema, match="nests deeper than 32"):
        check_schema_cost(obj(x=deep))
    with pytest.raises(UnsafeSchema, match="more than 4000 values"):
        check_schema_cost({"type": "object", "enum": list(range(5000))})
    with pytest.raises(UnsafeSchema, match="larger than 32768 bytes"):
        check_schema_cost({"type": "object", "description": "x" * 40_000})
    with pytest.raises(UnsafeSchema, match="once its '\\$ref's are followed"):
        defs = {f"d{i}": {"not": {"$ref": f"#/$defs/d{i + 1}"}} for i in range(60)}
        check_schema_cost({"type": "object", "$ref": "#/$defs/d0", "$defs": {**defs,
                                                                             "d60": {}}})


def test_self_referencing_python_dict_is_bounded() -> None:
    schema: dict[str, Any] = {"type": "object"}
    schema["not"] = schema
    with pytest.raises(UnsafeSchema):
        check_schema_cost(schema)


def worst_allowed() -> dict[str, Any]:
    """The chain at the deepest level the expansion bound lets through."""
    for depth in range(1, 16):
        try:
            check_schema_cost(chain(depth + 1))
        except UnsafeSchema:
            return chain(depth)
    raise AssertionError("no chain depth is refused")


def test_worst_allowed_chain_validates_fast() -> None:
    schema = worst_allowed()
    start = time.thread_time()
    problems = validate_instance(schema, {"x": "valid: every branch is walked"})
    elapsed = time.thread_time() - start
    print(f"worst allowed chain: validation {elapsed * 1000:.1f} ms")
    assert problems == [] and elapsed < 0.5
    assert validate_instance(schema, {"x": 1})


def test_validation_has_a_time_budget() -> None:
    schema = obj(x={"type": "array", "items": {"allOf": [{"minimum": 0}] * 1900}})
    check_schema_cost(schema)  # allowed: 1900 subschemas, but each applies to every item
    limits = SchemaLimits(budget_s=0.2)
    start = time.thread_time()
    with pytest.raises(ValidationBudgetExceeded, match="within 0.2 s"):
        validate_instance(schema, {"x": [0] * 50_000}, limits)
    assert time.thread_time() - start < 1.0


def test_instance_bounds() -> None:
    deep: Any = 1
    for _ in range(100):
        deep = [deep]
    with pytest.raises(ValidationBudgetExceeded, match="deeper than 64"):
        check_instance_shape({"x": deep})
    with pytest.raises(ValidationBudgetExceeded, match="more than 100000 values"):
        validate_instance({"type": "object"}, {"x": [0] * 100_001})
    deep = 1
    for _ in range(100_000):  # deeper than Python's recursion limit: walked iteratively
        deep = {"a": deep}
    with pytest.raises(ValidationBudgetExceeded):
        validate_instance({"type": "object"}, deep)


def test_unique_items_is_linear_and_json_equal() -> None:
    schema = obj(x={"type": "array", "uniqueItems": True})
    many = [{"k": i, "v": [i, str(i)]} for i in range(15_000)]  # 75k values
    start = time.thread_time()
    assert validate_instance(schema, {"x": many}) == []
    assert time.thread_time() - start < 1.0
    assert validate_instance(schema, {"x": [*many, {"v": [7, "7"], "k": 7}]})
    assert validate_instance(schema, {"x": [1, 1.0]})
    assert validate_instance(schema, {"x": [True, 1]}) == []
    assert validate_instance(schema, {"x": [[0], [False]]}) == []


def test_only_a_few_errors_are_collected() -> None:
    schema = obj(x={"type": "array", "items": {"type": "string"}})
    assert len(validate_instance(schema, {"x": list(range(10_000))})) == 5


TOOL = '''name = "t"
description = "d"
parameters = {params}

async def execute(params):
    return "x"
'''


def test_descriptor_refuses_hostile_schemas_with_a_load_error() -> None:
    for schema in (chain(16), {"type": "object", "$ref": "#"}):
        with pytest.raises(ToolLoadError, match="parameters: "):
            parse_descriptor(TOOL.format(params=repr(schema)))


@pytest.mark.parametrize(
    "params",
    ["-" * 60_000 + "1", "(" * 199 + "1" + ")" * 199, "{'a':" * 150 + "1" + "}" * 150,
     "{'type': 'object'}\nx = a" + ".b" * 30_000, "{'type': 'object'}\nx = 1" + "+1" * 30_000],
    ids=["unary", "parens", "dict", "attributes", "binop"],
)
def test_hostile_tool_files_fail_fast(params: str) -> None:
    start = time.thread_time()
    with pytest.raises(ToolLoadError):
        parse_descriptor(TOOL.format(params=params)[:64 * 1024])
    assert time.thread_time() - start < 0.5


# ---- whatever loads, validates without crashing ------------------------------------------

_REFS = ["#", "#/$defs/a", "#/$defs/b", "#/properties/a", "#/properties/a/items", "#/allOf/0",
         "#/$defs/a/allOf/1", "#/$defs", "#/required", "#/default"]
_scalars = st.one_of(st.sampled_from([0, 1, -1, 2.5, 10**30, "a", "", "object", True, None]),
                     st.sampled_from(_REFS))
_names = st.sampled_from(["a", "b", "type", "$ref"])


def _schemas(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    one = st.sampled_from(["not", "if", "then", "else", "items", "contains",
                           "additionalProperties", "propertyNames"])
    many = st.sampled_from(["allOf", "anyOf", "oneOf", "prefixItems"])
    named = st.sampled_from(["properties", "$defs", "dependentSchemas"])
    plain = st.sampled_from(["type", "enum", "const", "minimum", "multipleOf", "maxLength",
                             "required", "uniqueItems", "minContains", "default", "x-a"])
    data = st.one_of(_scalars, st.lists(_scalars, max_size=3),
                     st.sampled_from(["string", "array", ["object", "null"]]))
    entry = st.one_of(
        st.tuples(one, children), st.tuples(many, st.lists(children, min_size=1, max_size=3)),
        st.tuples(named, st.dictionaries(_names, children, max_size=3)),
        st.tuples(st.just("$ref"), st.sampled_from(_REFS)), st.tuples(plain, data),
        st.tuples(st.sampled_from(["default", "x-a"]), children),  # schema-shaped data
    )
    return st.one_of(st.booleans(), st.lists(entry, max_size=4).map(dict))


schemas = st.recursive(st.just({}), _schemas, max_leaves=12)
instances = st.recursive(_scalars, lambda c: st.one_of(st.lists(c, max_size=3),
                                                       st.dictionaries(_names, c, max_size=3)),
                         max_leaves=8)


@settings(max_examples=300, deadline=None)
@given(schema=schemas, instance=instances)
def test_a_schema_that_loads_never_crashes_validation(schema: Any, instance: Any) -> None:
    if not isinstance(schema, dict):
        return
    schema = {**schema, "type": "object"}
    try:
        check_parameters_schema(schema)
    except ToolLoadError:
        return
    try:
        validate_instance(schema, {"a": instance})
    except InvalidInput:
        pass
