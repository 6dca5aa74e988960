"""The transcript the embedded base model continues: tools, worked examples, the conversation.

Gemma 3 270M as packaged is a base model (no chat tuning): it continues text, it does not
follow instructions. So instead of chat messages it gets a plain transcript of "Navi"
working in a sandbox, in the step format of `embedded_grammar` (code blocks for `code_exec`,
one-line JSON for other tools, one line of text as the answer, tool output on `Result:`
lines), a few worked examples of that, the other offered tools (name, arguments,
description), then the conversation so far, ending with `Navi:` for the model to continue.
The examples show the format on questions unlike real ones; they are prompt text only,
nothing in our code looks at what the user asked.

The profile's system prompt and the loop's `[navi]` step notes are written for chat models
and are left out: a 270M base model does not follow them, it copies them (a restated
request reads as a new one). When no tools are offered (e.g. the context summariser) the
system text is kept, as the task description.
"""

from __future__ import annotations

import json
from typing import Any

from runtime.agent.llm.embedded_grammar import CODE_TOOL, FENCE
from runtime.agent.llm.types import ChatMessage

MAX_TOOL_RESULT_CHARS = 1500
MAX_MESSAGE_CHARS = 4000
MAX_DESCRIPTION_CHARS = 160
MAX_CONVERSATION_CHARS = 12000  # with the header and examples, well inside 8192 tokens
NOTE_MARK = "[navi] "

HEADER = (
    "This is a transcript of Navi, an assistant that works in a sandbox. To run code, Navi "
    "writes a Python or bash program in a code block; its output comes back as \"Result:\". "
    "Navi runs code instead of guessing, and only reports results it saw. Then Navi answers "
    "the user in plain text.")
TOOLS_NOTE = ('Navi can also use these tools, by writing {"tool": NAME, "arguments": {...}} '
              "on one line:")


def _call(name: str, arguments: dict[str, Any]) -> str:
    """How a call appears in the transcript: code_exec as a code block, others as JSON."""
    if name == CODE_TOOL and set(arguments) == {"language", "code"}:
        return f"{FENCE}{arguments['language']}\n{str(arguments['code']).rstrip()}\n{FENCE}"
    return json.dumps({"tool": name, "arguments": arguments}, ensure_ascii=False)


def _examples(tool_names: set[str]) -> list[str]:
    lines: list[str] = []
    if CODE_TOOL in tool_names:
        lines += [
            "User: How many days are there in 3 weeks and 4 days?",
            "Navi: " + _call(CODE_TOOL, {"language": "python", "code": "print(3 * 7 + 4)"}),
            "Result: 25",
            "Navi: 3 weeks and 4 days are 25 days.",
            "",
            "User: Use code_exec to reverse the word 'sandbox' and show me.",
            "Navi: " + _call(CODE_TOOL, {"language": "python",
                                         "code": "print('sandbox'[::-1])"}),
            "Result: xobdnas",
            "Navi: Reversed, 'sandbox' is 'xobdnas'.",
            "",
            "User: What is the square root of 7396? Use Python.",
            "Navi: " + _call(CODE_TOOL, {"language": "python",
                                         "code": "import math\nprint(math.sqrt(7396))"}),
            "Result: 86.0",
            "Navi: The square root of 7396 is 86.",
            "",
            "User: Sort the names Maria, Ann and Bob alphabetically.",
            "Navi: " + _call(CODE_TOOL, {"language": "python",
                                         "code": "print(sorted(['Maria', 'Ann', 'Bob']))"}),
            "Result: ['Ann', 'Bob', 'Maria']",
            "Navi: Sorted: Ann, Bob, Maria.",
            "",
            "User: Which Linux kernel does the sandbox run?",
            "Navi: " + _call(CODE_TOOL, {"language": "bash", "code": "uname -r"}),
            "Result: 6.1.0-13-amd64",
            "Navi: The sandbox runs kernel 6.1.0-13-amd64.",
            "",
        ]
    if "filesystem" in tool_names:
        lines += [
            "User: Save the word banana to fruit.txt.",
            "Navi: " + _call("filesystem", {"action": "write", "path": "fruit.txt",
                                            "content": "banana\n"}),
            "Result: wrote 7 bytes to fruit.txt",
            "Navi: Done: fruit.txt now contains banana.",
            "",
        ]
    lines += ["User: Hello!", "Navi: Hello! What can I do for you?", ""]
    return lines


def _kind(prop: Any) -> str:
    if not isinstance(prop, dict):
        return "value"
    if isinstance(prop.get("enum"), list):
        return "|".join(json.dumps(v) for v in prop["enum"])
    options = prop.get("anyOf") or prop.get("oneOf")
    if isinstance(options, list):
        return "|".join(dict.fromkeys(_kind(o) for o in options))
    return str(prop.get("type", "value"))


def _arguments(schema: Any) -> str:
    props = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(props, dict) or not props:
        return ""
    required = set(schema.get("required") or ())
    return ", ".join(f"{key}{'' if key in required else '?'}: {_kind(prop)}"
                     for key, prop in props.items())


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + " [...]"


def _result(text: str) -> str:
    """A tool result without the loop's `[navi]` step notes (a base model copies them, or
    takes the restated request as a new one) and surrounding whitespace."""
    kept = [line for line in text.splitlines() if not line.startswith(NOTE_MARK)]
    return "\n".join(kept).strip() or "(no output)"


def _one_line(text: str) -> str:
    return " ".join(text.split())


def render(messages: list[ChatMessage], tools: list[dict[str, Any]]) -> str:
    """The prompt for one step: everything up to and including the final `Navi:`."""
    names = {str(t["name"]) for t in tools}
    out: list[str] = []
    if tools:
        out.append(HEADER if CODE_TOOL in names else HEADER.split(" To run code")[0])
        others = [t for t in tools if t["name"] != CODE_TOOL]
        if others:
            out += ["", TOOLS_NOTE]
        for tool in others:
            desc = _clip(_one_line(str(tool.get("description", ""))), MAX_DESCRIPTION_CHARS)
            out.append(f"- {tool['name']}({_arguments(tool.get('parameters'))}): {desc}")
        out += ["", *_examples(names)]
    else:
        system = "\n\n".join(m.content.strip() for m in messages if m.role == "system")
        out += [HEADER.split(" To run code")[0], "",
                *([_clip(system, MAX_MESSAGE_CHARS), ""] if system else []),
                "User: Hello!", "Navi: Hello! What can I do for you?", ""]
    turns: list[str] = []
    for m in messages:
        if m.role == "user":
            turns.append("User: " + _one_line(_clip(m.content, MAX_MESSAGE_CHARS)))
        elif m.role == "assistant":
            if m.tool_calls:
                turns += ["Navi: " + _call(c.name, c.arguments if c.arguments is not None
                                           else {}) for c in m.tool_calls]
            elif m.content.strip():
                turns.append("Navi: " + _one_line(_clip(m.content, MAX_MESSAGE_CHARS)))
        elif m.role == "tool":
            turns.append("Result: " + _clip(_result(m.content), MAX_TOOL_RESULT_CHARS))
    return "\n".join([*out, *_recent(turns), "Navi:"])


def _recent(turns: list[str]) -> list[str]:
    """The latest turns that fit `MAX_CONVERSATION_CHARS` (the server's window is small; the
    loop's own compression counts chat tokens, not this transcript)."""
    kept: list[str] = []
    size = 0
    for line in reversed(turns):
        size += len(line) + 1
        if size > MAX_CONVERSATION_CHARS and kept:
            return ["(earlier conversation left out)", *reversed(kept)]
        kept.append(line)
    return list(reversed(kept))
