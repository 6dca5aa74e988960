"""A GBNF grammar that makes each embedded step a code block, a tool call or an answer.

Gemma 3 270M (the embedded default) is a base model: through a chat template it never
produces a tool call. llama.cpp can constrain sampling with a grammar, so every embedded
step (continuing `Navi:` in the transcript of `embedded_prompt`) is forced to be exactly one
of

    ```python|bash\\n<code>```                                  -> a `code_exec` call
    {"tool": "<an offered name>", "arguments": {<its schema>}}   -> any other tool
    <one line of text>                                           -> the final answer

Which one, and everything inside it, is still the model's choice; the grammar only rules
out the rest. Code is a fenced block rather than a JSON string because that is how a base
model has seen code (measured on ten requests: runnable code 4 times in a fence, once
as an escaped JSON string). Each tool's arguments follow its JSON schema (the subset our
tools use: objects with required and optional properties, string enums, numbers, booleans,
null, arrays, anyOf, local `$ref`s); anything else is any JSON value, and the tool's own
validation still checks the call. Whitespace is fixed (one space after `Navi:`, and after
`:` and `,` in JSON), so the output has one spelling and `embedded_backend` can tell early
which kind of step it is.

Cost, measured on two cores: grammar sampling over Gemma's 262k-token vocabulary adds about
50 ms per token (a step's median 1.4 s instead of 0.5 s). On the measured requests the
greedy choices were the same without it; what it buys is the guarantee of form (schema-valid
arguments, one-line answers, no stray text after a code block).
"""

from __future__ import annotations

import json
import re
from typing import Any

CODE_TOOL = "code_exec"
FENCE = "```"
TOOL_PREFIX = '{"tool": "'
MAX_DEPTH = 6

_BASE = r'''
string ::= "\"" char* "\""
nonempty-string ::= "\"" char char* "\""
char ::= [^"\\\x00-\x1f] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F])
integer ::= "-"? ("0" | [1-9] [0-9]{0,15})
number ::= integer ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})?
boolean ::= "true" | "false"
null ::= "null"
value ::= object | array | string | number | boolean | null
object ::= "{" ( string ": " value (", " string ": " value)* )? "}"
array ::= "[" ( value (", " value)* )? "]"
'''


def _literal(text: str) -> str:
    """A GBNF literal matching `text` exactly (JSON-encoded first when it is a JSON string)."""
    return json.dumps(text, ensure_ascii=True)


def _json_literal(value: Any) -> str:
    return _literal(json.dumps(value, ensure_ascii=True))


class _Builder:
    def __init__(self, root_schema: dict[str, Any]) -> None:
        self.rules: dict[str, str] = {}
        self.root_schema = root_schema

    def add(self, name: str, body: str) -> str:
        base = re.sub(r"[^a-zA-Z0-9-]+", "-", name).strip("-") or "r"
        key, n = base, 1
        while key in self.rules and self.rules[key] != body:
            n += 1
            key = f"{base}{n}"
        self.rules[key] = body
        return key

    def _resolve(self, schema: dict[str, Any]) -> dict[str, Any]:
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/"):
            node: Any = self.root_schema
            for part in ref[2:].split("/"):
                node = node.get(part) if isinstance(node, dict) else None
            if isinstance(node, dict):
                return node
        return schema

    def value(self, schema: Any, name: str, depth: int = 0) -> str:
        """The name of a rule (or a literal) matching one value of `schema`."""
        if not isinstance(schema, dict) or depth > MAX_DEPTH:
            return "value"
        schema = self._resolve(schema)
        if "const" in schema:
            return _json_literal(schema["const"])
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            return self.add(name, " | ".join(_json_literal(v) for v in schema["enum"]))
        options = schema.get("anyOf") or schema.get("oneOf")
        if isinstance(options, list) and options:
            parts = [self.value(o, f"{name}-{i}", depth + 1) for i, o in enumerate(options)]
            return self.add(name, " | ".join(dict.fromkeys(parts)))
        kind = schema.get("type")
        if isinstance(kind, list):
            parts = [self.value({**schema, "type": k}, f"{name}-{k}", depth + 1) for k in kind]
            return self.add(name, " | ".join(dict.fromkeys(parts)))
        if kind == "string":
            return "nonempty-string" if (schema.get("minLength") or 0) >= 1 else "string"
        if kind == "integer":
            return "integer"
        if kind == "number":
            return "number"
        if kind == "boolean":
            return "boolean"
        if kind == "null":
            return "null"
        if kind == "array":
            item = self.value(schema.get("items"), f"{name}-item", depth + 1)
            return self.add(name, f'"[" ( {item} (", " {item})* )? "]"')
        if kind == "object" or "properties" in schema:
            return self.object(schema, name, depth)
        return "value"

    def object(self, schema: dict[str, Any], name: str, depth: int) -> str:
        props = schema.get("properties")
        if not isinstance(props, dict) or not props:
            return '"{}"' if schema.get("additionalProperties") is False else "object"
        required = [k for k in schema.get("required") or () if k in props]
        optional = [k for k in props if k not in required]
        members = [(k, self.value(props[k], f"{name}-{k}", depth + 1)) for k in
                   required + optional]

        def member(key: str, rule: str) -> str:
            return f"{_literal(json.dumps(key) + ': ')} {rule}"

        # Required members first, in order; then each optional one may follow, in order.
        # With no required member the first optional one present opens the object.
        if required:
            body = ' ", " '.join(member(k, r) for k, r in members[:len(required)])
            tail = " ".join(f'(", " {member(k, r)})?' for k, r in members[len(required):])
            return self.add(name, f'"{{" {body} {tail} "}}"'.replace("  ", " "))
        alternatives = []
        for i, (k, r) in enumerate(members):
            rest = " ".join(f'(", " {member(k2, r2)})?' for k2, r2 in members[i + 1:])
            alternatives.append(f"{member(k, r)} {rest}".strip())
        return self.add(name, '"{" ( ' + " | ".join(f"({a})" for a in alternatives)
                        + ' )? "}"')


def step_grammar(tools: list[dict[str, Any]]) -> str:
    """GBNF for one embedded step (see the module docstring); answer only without tools."""
    names = [str(t["name"]) for t in tools]
    roots = ["answer"]
    lines = ['answer ::= [^`{ \\t\\n] [^\\n]* "\\n"']
    if CODE_TOOL in names:
        roots.insert(0, "fence")
        lines.append('fence ::= "```" ("python" | "bash") "\\n" code "```"')
        lines.append('code ::= ([^`] | "`" [^`] | "``" [^`])+')
    calls: list[str] = []
    builder = _Builder({})
    for tool in tools:
        name = str(tool["name"])
        if name == CODE_TOOL:
            continue
        params = tool.get("parameters") or {"type": "object", "properties": {}}
        builder.root_schema = params if isinstance(params, dict) else {}
        args = builder.value(builder.root_schema or {"type": "object"}, f"args-{name}")
        if args == "value":
            args = "object"
        head = _literal(f'{TOOL_PREFIX}{name}", "arguments": ')
        calls.append(f'{head} {args} "}}"')
    if calls:
        roots.insert(-1, "call")
        lines.append("call ::= " + " | ".join(f"({c})" for c in calls))
    lines.insert(0, f'root ::= " " ({" | ".join(roots)})')
    lines += [f"{k} ::= {v}" for k, v in builder.rules.items()]
    return "\n".join(lines) + "\n" + _BASE.strip() + "\n"
