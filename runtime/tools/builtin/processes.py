"""Tools over a session's background processes (`runtime.processes`): start one, list
them, read and feed their output, stop them, wait for a line or their exit.

`process_start` (and `terminal {background: true}`) is decided, audited and started by the
`ProcessService` itself (the policy's rule for the tool, its limits, a place among the
session's processes); the others run no code and are decided by the registry first.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from runtime.errors import NotFound
from runtime.processes.models import MAX_COMMAND, MAX_NAME, MAX_PORTS, ProcessInfo, StartSpec
from runtime.processes.service import ProcessService
from runtime.tools.base import BuiltinTool, NoParams, ToolContext, ToolParams, ToolResult

SHOWN = 16 * 1024  # output a tool answer shows (the rest: `since`)
PID = Field(min_length=3, max_length=64, description="the process's id (p_...)")


class ProcessAccess:
    """The app's `ProcessService`, bound once it exists (tools are built before it)."""

    def __init__(self, service: ProcessService | None = None) -> None:
        self.service = service

    def get(self) -> ProcessService:
        if self.service is None:
            raise NotFound("background processes are not available here")
        return self.service


def describe(info: ProcessInfo) -> str:
    state = info.state if info.state == "running" else \
        f"exited ({info.reason}, exit code {info.exit_code})"
    name = f" {info.name!r}" if info.name else ""
    ports = f", ports {info.ports}" if info.ports else ""
    return f"{info.id}{name} [{info.kind}] {state}: {info.command[:200]}{ports}"


async def start_process(access: ProcessAccess, ctx: ToolContext, spec: StartSpec
                        ) -> ToolResult:
    info = await access.get().start(ctx.subject, spec, approver=ctx.approver)
    text = (f"started {describe(info)}\nin {info.cwd}. It runs on after this call: read its "
            f"output with process_output, wait for a line with process_wait, stop it with "
            f"process_stop.")
    return ToolResult.ok(text, process=info.model_dump(mode="json"))


class ProcessStartParams(ToolParams):
    command: str = Field(min_length=1, max_length=MAX_COMMAND,
                         description="a shell command line, run with bash -c; it keeps running")
    cwd: str | None = Field(None, max_length=1024,
                            description="working directory: relative to the session's files, "
                            "or absolute under /workspace or /tmp")
    name: str | None = Field(None, min_length=1, max_length=MAX_NAME, description="a label")
    ports: list[int] = Field(default_factory=list, max_length=MAX_PORTS,
                             description="TCP ports (1024-65535) it will listen on")


class ProcessStartTool(BuiltinTool[ProcessStartParams]):
    name = "process_start"
    description = ("Start a long-running command (a dev server, a watcher, a database) in a "
                   "sandbox of its own that keeps running after this call; returns its id.")
    group = "group:exec"
    Params = ProcessStartParams
    runs_in_sandbox: ClassVar[bool] = True  # decided and audited by the process service

    def __init__(self, access: ProcessAccess | None = None) -> None:
        self.access = access or ProcessAccess()

    async def execute(self, params: ProcessStartParams, ctx: ToolContext) -> ToolResult:
        return await start_process(self.access, ctx, StartSpec(
            command=params.command, cwd=params.cwd, name=params.name, ports=params.ports))


class _ProcessTool(BuiltinTool[Any]):
    group = "group:exec"

    def __init__(self, access: ProcessAccess | None = None) -> None:
        self.access = access or ProcessAccess()


class ProcessListTool(_ProcessTool):
    name = "process_list"
    description = "List the session's background processes and sub-agents, oldest first."
    Params = NoParams

    async def execute(self, params: NoParams, ctx: ToolContext) -> ToolResult:
        found = await self.access.get().list(ctx.subject)
        text = "\n".join(describe(p) for p in found) or "no background processes"
        return ToolResult.ok(text, processes=[p.model_dump(mode="json") for p in found])


class ProcessOutputParams(ToolParams):
    process_id: str = PID
    since: int = Field(0, ge=0, description="byte offset to read from (a previous `next`)")


class ProcessOutputTool(_ProcessTool):
    name = "process_output"
    description = ("Read a background process's output (stdout and stderr as they came) from "
                   "a byte offset; the answer says the offset to continue from.")
    Params = ProcessOutputParams

    async def execute(self, params: ProcessOutputParams, ctx: ToolContext) -> ToolResult:
        answer = await self.access.get().output(ctx.subject, params.process_id, params.since,
                                                max_bytes=SHOWN)
        head = (f"[{params.process_id} {answer.state}"
                + (f", exit code {answer.exit_code}" if answer.state == "exited" else "")
                + f"; bytes {max(params.since, answer.first)}-{answer.next}; continue with "
                f"since={answer.next}]")
        return ToolResult.ok(f"{head}\n{answer.output}",
                             log=answer.model_dump(mode="json", exclude={"output"}))


class ProcessInputParams(ToolParams):
    process_id: str = PID
    data: str = Field(max_length=64 * 1024, description="text for its stdin (add \\n to end a "
                      "line)")


class ProcessInputTool(_ProcessTool):
    name = "process_input"
    description = "Write text to a running background process's stdin."
    Params = ProcessInputParams

    async def execute(self, params: ProcessInputParams, ctx: ToolContext) -> ToolResult:
        data = params.data.encode("utf-8", "surrogatepass")
        await self.access.get().input(ctx.subject, params.process_id, data)
        return ToolResult.ok(f"wrote {len(data)} bytes to {params.process_id}")


class ProcessStopParams(ToolParams):
    process_id: str = PID
    signal: Literal["INT", "TERM", "KILL", "HUP"] | None = Field(
        None, description="default TERM (KILL follows after 5 s)")


class ProcessStopTool(_ProcessTool):
    name = "process_stop"
    description = "Stop a background process (TERM, KILL after 5 s) or cancel a sub-agent."
    Params = ProcessStopParams

    async def execute(self, params: ProcessStopParams, ctx: ToolContext) -> ToolResult:
        info = await self.access.get().stop(ctx.subject, params.process_id, params.signal)
        return ToolResult.ok(describe(info), process=info.model_dump(mode="json"))


class ProcessWaitParams(ToolParams):
    process_id: str = PID
    pattern: str | None = Field(None, max_length=1000,
                                description="a regular expression (RE2) a line must match")
    timeout_s: float | None = Field(None, ge=0, le=600, description="default 30")
    since: int = Field(0, ge=0, description="match only output from this byte offset")


class ProcessWaitTool(_ProcessTool):
    name = "process_wait"
    description = ("Wait until a line of a background process's output matches a pattern "
                   "(e.g. a server's 'listening on'), until it exits, or until a timeout.")
    Params = ProcessWaitParams

    async def execute(self, params: ProcessWaitParams, ctx: ToolContext) -> ToolResult:
        got = await self.access.get().wait(ctx.subject, params.process_id, params.pattern,
                                           params.timeout_s, params.since)
        if got.matched:
            head = f"matched: {got.line}"
        elif got.exited:
            head = f"exited: {describe(got.process)}"
        else:
            head = f"timed out; still {got.process.state}"
        text = f"{head}\n--- recent output ---\n{got.recent}"
        return ToolResult.ok(text, wait=got.model_dump(mode="json", exclude={"recent"}))


def process_tools(access: ProcessAccess) -> list[BuiltinTool[Any]]:
    return [ProcessStartTool(access), ProcessListTool(access), ProcessOutputTool(access),
            ProcessInputTool(access), ProcessStopTool(access), ProcessWaitTool(access)]
