"""Tool arguments -> ``Invocation`` for the two exec tools, for callers without a registry.

`navi exec` needs to turn ``--arg`` pairs into what the Executor runs without building the
whole tool registry: ``code_exec`` {language: python|bash, code} and ``terminal`` {command}.
The argument models, size caps (one argv string must fit the kernel's MAX_ARG_STRLEN) and
argv come from the tools themselves (``runtime.tools.builtin.exec``), so this mapping can
never drift from what the API runs. Temporary: it folds into the tool registry later.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from runtime.errors import InvalidInput
from runtime.executor import Invocation
from runtime.tools.base import format_validation_error
from runtime.tools.builtin.exec import CodeExecParams, CodeExecTool, TerminalParams, TerminalTool

SUPPORTED = ("code_exec", "terminal")


def invocation_for(tool: str, args: dict[str, Any]) -> Invocation:
    """Validate `args` for `tool` and return what to run; ``InvalidInput`` when they are bad."""
    try:
        if tool == "code_exec":
            return CodeExecTool.call_for(CodeExecParams.model_validate(args))
        if tool == "terminal":
            return TerminalTool.call_for(TerminalParams.model_validate(args))
    except ValidationError as exc:
        raise InvalidInput(f"{tool}: invalid arguments: {format_validation_error(exc)}",
                           tool=tool) from None
    raise InvalidInput(f"navi exec runs {' and '.join(SUPPORTED)} only, not {tool!r}", tool=tool)
