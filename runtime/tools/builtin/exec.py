"""`code_exec` and `terminal`: run agent-written code, always in a fresh sandbox container.

The tool only says *what* to run (`call_for`); the Executor decides, audits and runs it in
the image the policy names, with the session workspace as the working directory. Output
streams to `ctx.on_output` while the container runs.
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from runtime.errors import InvalidInput, NaviError
from runtime.processes.models import StartSpec
from runtime.sandbox.stdin_program import python_program, shell_program
from runtime.tools.base import BuiltinTool, ToolContext, ToolParams, ToolResult
from runtime.tools.builtin.processes import ProcessAccess, start_process
from runtime.tools.sandboxed import (
    ExecOutcome,
    Invocation,
    exec_metadata,
    run_sandboxed,
    with_run,
)

# The code goes to the container over stdin (``stdin_program``: never on a command line,
# where the engine's config and /proc/<pid>/cmdline show it); the caps are the contract's.
MAX_CODE_BYTES = 120 * 1024
MAX_COMMAND_BYTES = 64 * 1024
WORKDIR = "/workspace"


def _fits(value: str, limit: int, what: str) -> str:
    if "\x00" in value:
        raise ValueError(f"{what} contains a NUL byte")
    if len(value.encode("utf-8", errors="surrogatepass")) > limit:
        raise ValueError(f"{what} is larger than {limit} bytes")
    return value


class CodeExecParams(ToolParams):
    language: Literal["python", "bash"] = Field(description="python (3) or bash")
    code: str = Field(min_length=1, description="the program text")

    @field_validator("code")
    @classmethod
    def _size(cls, value: str) -> str:
        return _fits(value, MAX_CODE_BYTES, "code")


class TerminalParams(ToolParams):
    command: str = Field(min_length=1, description="a shell command line, run with bash -c")
    timeout_s: float | None = Field(
        None, gt=0, le=3600,
        description="seconds before the command is killed (default: the policy's; above the "
                    "policy's max it is clamped, and the result says the value used)")
    cwd: str | None = Field(
        None, max_length=1024,
        description="working directory, relative to the session's files (default: their top)")
    user: Literal["root"] | None = Field(
        None, description="root: run as uid 0 inside the sandbox; only where the policy runs "
                          "the call under gVisor with allow_root (else denied)")
    background: bool = Field(
        False, description="true: start it as a background process that keeps running after "
                           "this call (returns its id; see process_output, process_stop)")

    @field_validator("command")
    @classmethod
    def _size(cls, value: str) -> str:
        return _fits(value, MAX_COMMAND_BYTES, "command")


def outcome_result(outcome: ExecOutcome) -> ToolResult:
    """Exec fields in the metadata; `output` is stdout then stderr, as a model reads it."""
    meta = exec_metadata(outcome)
    res = outcome.result
    output = meta["stdout"]
    if meta["stderr"]:
        sep = "\n" if output and not output.endswith("\n") else ""
        output = f"{output}{sep}[stderr]\n{meta['stderr']}"
    if res.ok:
        return with_run(ToolResult.ok(output, **meta), outcome)
    if res.timed_out:
        error = f"timed out after {outcome.timeout_s:g} s"
    elif res.oom_killed:
        error = "killed: out of memory"
    else:
        error = f"exit code {res.exit_code}"
    return with_run(ToolResult.fail(error, output=output, **meta), outcome)


class CodeExecTool(BuiltinTool[CodeExecParams]):
    name = "code_exec"
    description = (
        "Run a Python 3 or bash program in a fresh sandbox (the session's files as working "
        "directory; no network unless the policy grants egress to named hosts); returns "
        "stdout, stderr and the exit code."
    )
    group = "group:exec"
    Params = CodeExecParams
    runs_in_sandbox: ClassVar[bool] = True

    def probe_args(self) -> list[dict[str, Any]]:
        return [{"language": "python"}, {"language": "bash"}]

    @staticmethod
    def call_for(params: CodeExecParams) -> Invocation:
        if params.language == "python":
            argv, frame = python_program(params.code)
        else:
            argv, frame = shell_program(params.code)
        return Invocation(argv=argv, stdin=frame)

    async def execute(self, params: CodeExecParams, ctx: ToolContext) -> ToolResult:
        action = self.action(params.model_dump(), ctx)
        return outcome_result(await run_sandboxed(ctx, action, self.call_for(params)))


class TerminalTool(BuiltinTool[TerminalParams]):
    name = "terminal"
    description = (
        "Run one shell command line (bash -c) in a fresh sandbox with the session's files as "
        "working directory (or `cwd` below them); returns stdout, stderr and the exit code. "
        "`timeout_s` for long commands (clamped to the policy's max)."
    )
    group = "group:exec"
    Params = TerminalParams
    runs_in_sandbox: ClassVar[bool] = True

    def __init__(self, processes: ProcessAccess | None = None) -> None:
        self.processes = processes or ProcessAccess()

    @staticmethod
    def call_for(params: TerminalParams, workdir: str = WORKDIR) -> Invocation:
        # the workspace stays mounted at /workspace; the command runs, as `bash -c` would
        # run it, from the directory below it (an argument, never text pasted into a script)
        argv, frame = shell_program(params.command,
                                    None if workdir == WORKDIR else workdir)
        return Invocation(argv=argv, stdin=frame, root=params.user == "root")

    async def execute(self, params: TerminalParams, ctx: ToolContext) -> ToolResult:
        workdir = await _workdir(ctx, params.cwd)
        if params.background:  # a process of its own, decided under this tool's rule
            if params.user is not None:
                raise InvalidInput("a background command cannot run as root")
            return await start_process(self.processes, ctx, StartSpec(
                command=params.command, cwd=workdir, tool=self.name))
        action = self.action(params.model_dump(exclude_none=True), ctx)
        if params.timeout_s is not None:
            action = action.model_copy(update={"timeout_s": params.timeout_s})
        outcome = await run_sandboxed(ctx, action, self.call_for(params, workdir))
        result = outcome_result(outcome)
        if params.timeout_s is not None and outcome.timeout_s < params.timeout_s:
            note = (f"[timeout: {outcome.timeout_s:g} s, the policy's maximum, not the "
                    f"{params.timeout_s:g} s asked]")
            result = result.model_copy(update={"output": f"{note}\n{result.output or ''}"})
        return result


async def _workdir(ctx: ToolContext, cwd: str | None) -> str:
    """`/workspace/<cwd>` for a directory inside the session's files; anything else (a path
    that leaves them, a link, a file, nothing) is `InvalidInput`."""
    if cwd is None or cwd.strip("/") in ("", "."):
        return WORKDIR
    ws = ctx.workspace
    if ws is None:
        raise InvalidInput("this call has no session workspace for a cwd")
    try:
        found = await asyncio.to_thread(ws.stat, cwd.strip("/") if not cwd.startswith("/")
                                        else cwd)
    except NaviError as exc:
        raise InvalidInput(f"cwd {cwd!r}: {exc.message}") from None
    if found.kind != "dir":
        raise InvalidInput(f"cwd {cwd!r} is a file, not a directory")
    return f"{WORKDIR}/{found.path}"
