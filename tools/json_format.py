"""Shipped example user tool: validate and pretty-print (or minify) a JSON document."""

import json

name = "json_format"
description = "Check that a text is valid JSON and return it pretty-printed or minified."
parameters = {
    "type": "object",
    "properties": {
        "text": {"type": "string", "description": "the JSON document"},
        "indent": {"type": "integer", "minimum": 0, "maximum": 8, "default": 2},
        "minify": {"type": "boolean", "default": False},
        "sort_keys": {"type": "boolean", "default": False},
    },
    "required": ["text"],
    "additionalProperties": False,
}


async def execute(params):
    try:
        value = json.loads(params["text"])
    except json.JSONDecodeError as exc:
        return f"invalid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}"
    sort_keys = params.get("sort_keys", False)
    if params.get("minify"):
        return json.dumps(value, separators=(",", ":"), sort_keys=sort_keys)
    return json.dumps(value, indent=params.get("indent", 2), sort_keys=sort_keys)
