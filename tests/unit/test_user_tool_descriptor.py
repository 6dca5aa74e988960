"""The ast-only descriptor reader: literals accepted, anything that would need running refused."""

from __future__ import annotations

import pytest

from runtime.errors import InvalidInput
from runtime.tools.user.descriptor import (
    MAX_TOOL_BYTES,
    ToolLoadError,
    parse_descriptor,
    validate_params,
)

GOOD = '''
"""doc"""
import json

name = "shout"
description = "Upper-case a text."
parameters = {
    "type": "object",
    "properties": {"text": {"type": "string"}, "times": {"type": "integer", "minimum": 1}},
    "required": ["text"],
    "additionalProperties": False,
}

async def execute(params):
    return params["text"].upper()
'''


def test_good_descriptor_is_read_with_hash() -> None:
    d = parse_descriptor(GOOD)
    assert d.name == "shout"
    assert d.description == "Upper-case a text."
    assert d.parameters["required"] == ["text"]
    assert len(d.sha256) == 64 and d.size == len(GOOD.encode())


def test_annotated_assignments_are_literals_too() -> None:
    src = GOOD.replace('name = "shout"', 'name: str = "shout"')
    assert parse_descriptor(src).name == "shout"


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (('name = "shout"', 'name = "sh" + "out"'), "literal"),
        (('name = "shout"', 'name = NAME'), "literal"),
        (('name = "shout"', 'name = f"shout"'), "literal"),
        (('name = "shout"', 'name = __import__("os").getcwd()'), "literal"),
        (('name = "shout"', 'name = "Shout!"'), "tool name"),
        (('name = "shout"', 'name = "shout"\nname = "again"'), "more than once"),
        (('name = "shout"', 'name = description = "x"'), "on its own"),
        (('name = "shout"', ''), "missing"),
        (('description = "Upper-case a text."', 'description = ""'), "non-empty"),
        (('description = "Upper-case a text."', 'description = 3'), "non-empty"),
        (('"type": "object",', '"type": "array",'), '"type": "object"'),
        (('"type": "integer"', '"type": "intgr"'), "not a valid JSON Schema"),
        (('"type": "string"}', '"type": "string", "pattern": "(a+)+$"}'), "pattern"),
        (('"required": ["text"],', '"$ref": "https://example.org/s.json",'), "$ref"),
        (("async def execute(params):", "def execute(params):"), "async def"),
        (("async def execute(params):", "async def run(params):"), "async def execute"),
        (("async def execute(params):", "async def execute():"), "one argument"),
        (("import json", "import json\n  oops"), "syntax error"),
    ],
)
def test_bad_descriptors_are_load_errors(change: tuple[str, str], reason: str) -> None:
    old, new = change
    assert old in GOOD
    with pytest.raises(ToolLoadError) as exc:
        parse_descriptor(GOOD.replace(old, new, 1))
    assert reason in exc.value.message


def test_property_named_pattern_is_not_a_keyword() -> None:
    src = GOOD.replace('"times":', '"pattern": {"type": "string"}, "times":')
    assert "pattern" in parse_descriptor(src).parameters["properties"]


def test_size_utf8_and_nul_limits() -> None:
    with pytest.raises(ToolLoadError, match="larger than"):
        parse_descriptor(GOOD + "#" * MAX_TOOL_BYTES)
    with pytest.raises(ToolLoadError, match="UTF-8"):
        parse_descriptor(GOOD.encode() + b"\xff\xfe")
    with pytest.raises(ToolLoadError, match="NUL"):
        parse_descriptor(GOOD + "\x00")


def test_deep_nesting_is_a_load_error_not_a_crash() -> None:
    src = GOOD.replace('description = "Upper-case a text."',
                       'description = ' + "[" * 5000 + "]" * 5000)
    with pytest.raises(ToolLoadError):
        parse_descriptor(src)


def test_params_checked_against_the_tools_own_schema() -> None:
    d = parse_descriptor(GOOD)
    assert validate_params(d, {"text": "hi", "times": 2}) == {"text": "hi", "times": 2}
    with pytest.raises(InvalidInput, match="'text' is a required property"):
        validate_params(d, {})
    with pytest.raises(InvalidInput, match="times"):
        validate_params(d, {"text": "x", "times": 0})
    with pytest.raises(InvalidInput, match="Additional properties"):
        validate_params(d, {"text": "x", "extra": 1})
    with pytest.raises(InvalidInput, match="JSON object"):
        validate_params(d, ["text"])
