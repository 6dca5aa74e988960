"""Template of a user tool (copy it; files starting with '_' are never loaded).

The runtime reads `name`, `description` and `parameters` WITHOUT running this file: they
must be plain literals (strings, numbers, lists, dicts, True/False/None) assigned once at
module level. `parameters` is a JSON Schema of type "object" (the keywords `pattern` and
`patternProperties` are not allowed; check formats inside `execute`).

`execute` runs in a sandbox (tools-runner image): python3 standard library only, no
network, read-only root file system, /tmp is a small tmpfs, the session's files are the
working directory. It receives the arguments (already checked against `parameters`) and
returns a string. Anything it prints goes to the log (stderr), not into the result.
"""

name = "my_tool"  # must equal the file name without .py: [a-z][a-z0-9_]{0,63}
description = "One or two sentences: what the tool does and when to use it."
parameters = {
    "type": "object",
    "properties": {
        "text": {"type": "string", "description": "the input text"},
    },
    "required": ["text"],
    "additionalProperties": False,
}


async def execute(params):
    text = params["text"]
    return f"you said: {text}"
