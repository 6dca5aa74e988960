"""Read a user tool's descriptor with `ast` only: the supervisor never imports agent-written code.

A user tool (Navi's format) is a Python file with module-level literals `name`,
`description`, `parameters` (a JSON-schema dict) and an `async def execute(params)`. Here the
source is *parsed*, never compiled to bytecode or executed: each of the three names must be
assigned exactly once at module level, and the assigned node must be a literal
(`ast.literal_eval`); anything else (a call, a name, an f-string, an import) is a load error.

The parameter schema is checked to be a JSON Schema of type object that is cheap to evaluate
(`runtime.tools.schema_guard`): the schema is agent-written and validation runs in the
supervisor, so regex keywords, `$ref` cycles, non-local refs and schemas that expand
exponentially are refused here, at write/load time, with a message that says why.
"""

from __future__ import annotations

import ast
import hashlib
import re
from typing import Any

import jsonschema
from pydantic import BaseModel, ConfigDict

from runtime.errors import InvalidInput
from runtime.tools.base import TOOL_NAME_PATTERN
from runtime.tools.schema_guard import (
    DEFAULT_LIMITS,
    UnsafeSchema,
    check_schema_cost,
    validate_instance,
)

MAX_TOOL_BYTES = 64 * 1024
MAX_DESCRIPTION_CHARS = 4000
MAX_SCHEMA_BYTES = DEFAULT_LIMITS.max_bytes
_NAME = re.compile(TOOL_NAME_PATTERN)
_FIELDS = ("name", "description", "parameters")


class ToolLoadError(InvalidInput):
    """A user tool file that cannot be loaded; the message says why (shown by `list_tools`)."""

    code = "tool_load_error"


class UserToolDescriptor(BaseModel):
    """What the supervisor knows about a user tool without running it."""

    model_config = ConfigDict(frozen=True)

    name: str
    description: str
    parameters: dict[str, Any]
    sha256: str
    size: int


def content_hash(source: bytes) -> str:
    return hashlib.sha256(source).hexdigest()


def check_tool_name(name: Any) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ToolLoadError(
            "tool name must match ^[a-z][a-z0-9_]{0,63}$ (lowercase letters, digits, '_', "
            "starting with a letter)"
        )
    return name


def parse_descriptor(source: bytes | str) -> UserToolDescriptor:
    """Parse (never run) a user tool; raises `ToolLoadError` with a readable reason."""
    raw = source.encode("utf-8") if isinstance(source, str) else source
    if len(raw) > MAX_TOOL_BYTES:
        raise ToolLoadError(f"tool file is larger than {MAX_TOOL_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ToolLoadError("tool file is not valid UTF-8") from None
    if "\x00" in text:
        raise ToolLoadError("tool file contains a NUL byte")
    try:
        tree = ast.parse(text, filename="<user tool>", mode="exec")
    except SyntaxError as exc:
        raise ToolLoadError(f"syntax error at line {exc.lineno}: {exc.msg}") from None
    except (RecursionError, MemoryError, ValueError):
        raise ToolLoadError("tool file could not be parsed (too deeply nested)") from None

    values = _module_literals(tree)
    missing = [f for f in _FIELDS if f not in values]
    if missing:
        raise ToolLoadError(f"missing module-level literal(s): {', '.join(missing)}")
    _require_async_execute(tree)

    name = check_tool_name(values["name"])
    description = values["description"]
    if not isinstance(description, str) or not description.strip():
        raise ToolLoadError("description must be a non-empty string")
    if len(description) > MAX_DESCRIPTION_CHARS:
        raise ToolLoadError(f"description is longer than {MAX_DESCRIPTION_CHARS} characters")
    parameters = check_parameters_schema(values["parameters"])
    return UserToolDescriptor(
        name=name,
        description=description.strip(),
        parameters=parameters,
        sha256=content_hash(raw),
        size=len(raw),
    )


def _targets(node: ast.stmt) -> tuple[list[str], ast.expr | None]:
    if isinstance(node, ast.Assign):
        names = [t.id for t in node.targets if isinstance(t, ast.Name)]
        return names, node.value
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [node.target.id], node.value
    if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
        return [node.target.id], None
    return [], None


def _module_literals(tree: ast.Module) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for node in tree.body:
        names, value = _targets(node)
        for target in names:
            if target not in _FIELDS:
                continue
            if target in values:
                raise ToolLoadError(f"{target!r} is assigned more than once at module level")
            if value is None or len(names) > 1:
                raise ToolLoadError(f"{target!r} must be assigned a literal value on its own")
            try:
                values[target] = ast.literal_eval(value)
            except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
                raise ToolLoadError(
                    f"{target!r} (line {node.lineno}) must be a literal "
                    "(strings, numbers, lists, dicts, True/False/None), not an expression"
                ) from None
    return values


def _require_async_execute(tree: ast.Module) -> None:
    found: ast.AsyncFunctionDef | None = None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name == "execute":
            raise ToolLoadError("'execute' must be defined with 'async def'")
        if isinstance(node, ast.AsyncFunctionDef) and node.name == "execute":
            if found is not None:
                raise ToolLoadError("'execute' is defined more than once")
            found = node
    if found is None:
        raise ToolLoadError("no module-level 'async def execute(params)'")
    args = found.args
    positional = len(args.posonlyargs) + len(args.args)
    if positional < 1 and args.vararg is None:
        raise ToolLoadError("'execute' must accept one argument: params")


def check_parameters_schema(schema: Any) -> dict[str, Any]:
    """The `parameters` literal must be a JSON Schema for an object, safe to evaluate here."""
    if not isinstance(schema, dict):
        raise ToolLoadError("parameters must be a dict (a JSON Schema of type object)")
    try:
        check_schema_cost(schema)
    except UnsafeSchema as exc:
        raise ToolLoadError(f"parameters: {exc.message}") from None
    if schema.get("type") != "object":
        raise ToolLoadError('parameters must have "type": "object"')
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ToolLoadError(f"parameters is not a valid JSON Schema: {exc.message}") from None
    return schema


def validate_params(descriptor: UserToolDescriptor, params: Any) -> dict[str, Any]:
    """Check call arguments against the tool's own schema; `InvalidInput` lists what is wrong.

    CPU-bound but time-boxed (`schema_guard.validate_instance`): async callers run it in a
    thread."""
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise InvalidInput(f"{descriptor.name}: arguments must be a JSON object")
    try:
        problems = validate_instance(descriptor.parameters, params)
    except InvalidInput as exc:
        raise type(exc)(f"{descriptor.name}: {exc.message}", tool=descriptor.name) from None
    if problems:
        raise InvalidInput(
            f"{descriptor.name}: invalid arguments: {'; '.join(problems)}", tool=descriptor.name
        )
    return params
