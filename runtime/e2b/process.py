"""envd's `process.Process` Connect service on Navi's background processes.

The wire has no background flag: `commands.run(...)` with or without `background=True` is
the same `Start` stream, so every command is a Navi process (`services.processes`: a fresh
hardened container of its own, decided as `process_start` and audited `process.start` with
the command's SHA-256; the command reaches the container by stdin, never on a command line).
Closing the stream never stops it; it ends when it exits, is killed, or reaches the policy's
`max_lifetime_s`. E2B's integer pids map to Navi's `p_...` ids per sandbox (`PidTable`, in
memory: after a server restart earlier pids are unknown). PTYs, resizing and client-streamed
input are not offered (UNIMPLEMENTED with a message).
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from connectrpc.code import Code
from connectrpc.errors import ConnectError
from connectrpc.request import RequestContext
from protobuf import Oneof

from runtime.e2b.auth import SandboxCaller, sandbox_caller
from runtime.e2b.envd import process_pb as pb
from runtime.e2b.envd.process_connect import ProcessASGIApplication
from runtime.e2b.errors import connect_error
from runtime.e2b.paths import HOME
from runtime.e2b.sandboxes import MAX_ENVS, check_map
from runtime.e2b.store import SandboxStore
from runtime.errors import NaviError
from runtime.policy.decision import Subject

if TYPE_CHECKING:
    from runtime.api.services import Services

KEEPALIVE_S = 20.0
WORKDIR = "/workspace"  # where Navi's process containers mount the session's workspace
SIGNALS = {pb.Signal.SIGKILL: "KILL", pb.Signal.SIGTERM: "TERM"}
NO_PTY = "PTY sessions are not offered by Navi's E2B API: use commands.run() instead"


@dataclass
class Started:
    process_id: str
    config: pb.ProcessConfig
    tag: str | None


@dataclass
class PidTable:
    """E2B pid <-> Navi process id, per sandbox."""

    next_pid: dict[str, int] = field(default_factory=dict)
    by_pid: dict[str, dict[int, Started]] = field(default_factory=dict)

    def add(self, session: str, started: Started) -> int:
        pid = self.next_pid.get(session, 1000) + 1
        self.next_pid[session] = pid
        self.by_pid.setdefault(session, {})[pid] = started
        return pid

    def find(self, session: str, selector: pb.ProcessSelector | None) -> tuple[int, Started]:
        table = self.by_pid.get(session, {})
        match selector.selector if selector is not None else None:
            case Oneof(field="pid", value=value):
                pid = int(value)
                found = table.get(pid)
                if found is not None:
                    return pid, found
                raise ConnectError(Code.NOT_FOUND, f"process with pid {pid} not found")
            case Oneof(field="tag", value=tag):
                for pid, started in table.items():  # noqa: B007
                    if started.tag == tag:
                        return pid, started
                raise ConnectError(Code.NOT_FOUND, f"process with tag {tag!r} not found")
        raise ConnectError(Code.INVALID_ARGUMENT, "a process pid or tag is required")


def command_of(config: pb.ProcessConfig) -> str:
    """The shell command the SDK means (it sends `/bin/bash -l -c <cmd>`)."""
    args = list(config.args)
    if config.cmd in ("/bin/bash", "bash", "/bin/sh", "sh") and len(args) == 3 \
            and args[0] == "-l" and args[1] == "-c":
        return args[2]
    if config.cmd in ("/bin/bash", "bash", "/bin/sh", "sh") and len(args) == 2 \
            and args[0] == "-c":
        return args[1]
    return shlex.join([config.cmd, *args])


def navi_cwd(cwd: str | None) -> str:
    """E2B's cwd (`/home/user` by default) in Navi's terms (the same directory, named
    under /workspace: the process service takes cwds there or under /tmp)."""
    if not cwd or cwd == "~":
        cwd = HOME
    if cwd == HOME or cwd.startswith(HOME + "/"):
        return WORKDIR + cwd[len(HOME):]
    return cwd


def _event(kind: str, value: Any) -> pb.ProcessEvent:
    return pb.ProcessEvent(event=cast(Any, Oneof(kind, value)))


def _start_event(pid: int) -> pb.ProcessEvent:
    return _event("start", pb.ProcessEvent.StartEvent(pid=pid))


class ProcessService:
    def __init__(self, services: Callable[[], Services], pids: PidTable) -> None:
        self._services = services
        self.pids = pids

    async def _caller(self, ctx: RequestContext[Any, Any]) -> tuple[SandboxCaller, Any]:
        try:
            caller = await sandbox_caller(self._services(), ctx.request_headers)
        except NaviError as exc:
            raise connect_error(exc) from None
        processes = getattr(caller.services, "processes", None)
        if processes is None:
            raise ConnectError(Code.UNAVAILABLE, "commands need Navi's background processes, "
                               "which this server does not run")
        return caller, processes

    def start(self, request: pb.StartRequest, ctx: RequestContext[Any, Any]
              ) -> AsyncIterator[pb.StartResponse]:
        return self._start(request, ctx)

    async def _start(self, request: pb.StartRequest, ctx: RequestContext[Any, Any]
                     ) -> AsyncIterator[pb.StartResponse]:
        from runtime.processes.models import StartSpec

        if request.pty is not None:
            raise ConnectError(Code.UNIMPLEMENTED, NO_PTY)
        caller, processes = await self._caller(ctx)
        config = request.process or pb.ProcessConfig()
        try:
            env = {**caller.sandbox.envs,
                   **check_map("envs", dict(config.envs), MAX_ENVS)}
            subject = await caller.subject()
            spec = StartSpec(command=command_of(config), cwd=navi_cwd(config.cwd or None),
                             env=env, name=request.tag or None)
            info = await processes.start(subject, spec,
                                         token_expires_at=caller.principal.expires_at)
        except NaviError as exc:
            raise connect_error(exc) from None
        except ValueError as exc:  # the spec's own bounds
            raise ConnectError(Code.INVALID_ARGUMENT, str(exc).splitlines()[0]) from None
        close = getattr(processes, "close_stdin", None)
        if not request.stdin and close is not None:  # E2B's stdin=False: EOF at once
            with contextlib.suppress(NaviError):
                await close(subject, info.id)
        pid = self.pids.add(caller.session.id, Started(info.id, config, request.tag or None))
        yield pb.StartResponse(event=_start_event(pid))
        async for event in self._follow(processes, subject, info.id, 0):
            yield pb.StartResponse(event=event)

    def connect(self, request: pb.ConnectRequest, ctx: RequestContext[Any, Any]
                ) -> AsyncIterator[pb.ConnectResponse]:
        return self._connect(request, ctx)

    async def _connect(self, request: pb.ConnectRequest, ctx: RequestContext[Any, Any]
                       ) -> AsyncIterator[pb.ConnectResponse]:
        caller, processes = await self._caller(ctx)
        pid, started = self.pids.find(caller.session.id, request.process)
        subject = await caller.subject()
        try:
            since = (await processes.output(subject, started.process_id)).next
        except NaviError as exc:
            raise connect_error(exc) from None
        yield pb.ConnectResponse(event=_start_event(pid))
        async for event in self._follow(processes, subject, started.process_id, since):
            yield pb.ConnectResponse(event=event)

    async def _follow(self, processes: Any, subject: Any, process_id: str, since: int
                      ) -> AsyncIterator[pb.ProcessEvent]:
        """Its output as data events (keep-alives while quiet), then its end."""
        pieces = processes.follow(subject, process_id, since=since)
        step: asyncio.Future[Any] | None = None
        try:
            while True:
                step = asyncio.ensure_future(anext(pieces))
                done, _ = await asyncio.wait({step}, timeout=KEEPALIVE_S)
                while not done:
                    yield _event("keepalive", pb.ProcessEvent.KeepAlive())
                    done, _ = await asyncio.wait({step}, timeout=KEEPALIVE_S)
                try:
                    piece = step.result()
                except StopAsyncIteration:
                    step = None
                    break
                step = None
                stream = "stderr" if piece.stream == "stderr" else "stdout"
                data = pb.ProcessEvent.DataEvent(output=cast(Any, Oneof(stream, piece.data)))
                yield _event("data", data)
            info = await processes.get(subject, process_id)
        except NaviError as exc:
            raise connect_error(exc) from None
        finally:
            if step is not None:
                step.cancel()
            with contextlib.suppress(Exception):
                await pieces.aclose()
        code = info.exit_code if info.exit_code is not None else -1
        error = None if info.reason in (None, "exited") else f"process {info.reason}"
        end = pb.ProcessEvent.EndEvent(exit_code=code, exited=info.exit_code is not None,
                                       status=f"exit status {code}", error=error)
        yield _event("end", end)

    async def list(self, request: pb.ListRequest, ctx: RequestContext[Any, Any]
                   ) -> pb.ListResponse:
        caller, processes = await self._caller(ctx)
        subject = await caller.subject()
        running = {p.id for p in await processes.list(subject) if p.state == "running"}
        found = [pb.ProcessInfo(config=s.config, pid=pid, tag=s.tag)
                 for pid, s in self.pids.by_pid.get(caller.session.id, {}).items()
                 if s.process_id in running]
        return pb.ListResponse(processes=found)

    async def send_input(self, request: pb.SendInputRequest, ctx: RequestContext[Any, Any]
                         ) -> pb.SendInputResponse:
        caller, processes = await self._caller(ctx)
        _, started = self.pids.find(caller.session.id, request.process)
        match request.input.input if request.input is not None else None:
            case Oneof(field="stdin", value=data):
                pass
            case _:
                raise ConnectError(Code.UNIMPLEMENTED, NO_PTY)
        try:
            await processes.input(await caller.subject(), started.process_id, bytes(data))
        except NaviError as exc:
            raise connect_error(exc) from None
        return pb.SendInputResponse()

    async def send_signal(self, request: pb.SendSignalRequest, ctx: RequestContext[Any, Any]
                          ) -> pb.SendSignalResponse:
        caller, processes = await self._caller(ctx)
        _, started = self.pids.find(caller.session.id, request.process)
        name = SIGNALS.get(request.signal)
        if name is None:
            raise ConnectError(Code.INVALID_ARGUMENT, "only SIGTERM and SIGKILL can be sent")
        try:
            await processes.signal(await caller.subject(), started.process_id, name)
        except NaviError as exc:
            raise connect_error(exc) from None
        return pb.SendSignalResponse()

    async def close_stdin(self, request: pb.CloseStdinRequest, ctx: RequestContext[Any, Any]
                          ) -> pb.CloseStdinResponse:
        caller, processes = await self._caller(ctx)
        _, started = self.pids.find(caller.session.id, request.process)
        close = getattr(processes, "close_stdin", None)
        if close is None:
            raise ConnectError(Code.UNIMPLEMENTED, "closing a command's stdin is not offered")
        try:
            await close(await caller.subject(), started.process_id)
        except NaviError as exc:
            raise connect_error(exc) from None
        return pb.CloseStdinResponse()

    async def update(self, request: pb.UpdateRequest, ctx: RequestContext[Any, Any]
                     ) -> pb.UpdateResponse:
        raise ConnectError(Code.UNIMPLEMENTED, NO_PTY)

    async def stream_input(self, request: AsyncIterator[pb.StreamInputRequest],
                           ctx: RequestContext[Any, Any]) -> pb.StreamInputResponse:
        raise ConnectError(Code.UNIMPLEMENTED, "streamed input is not offered by Navi's E2B "
                           "API: use commands.send_stdin()")


def add_home_mount(services: Services) -> None:
    """Processes of an E2B sandbox see its workspace at /home/user too (where E2B code
    expects its files), beside /workspace; a launch hook of Navi's process service."""
    from runtime.processes.launch import LaunchExtras
    from runtime.sandbox.docker.spec import BindMount

    processes = getattr(services, "processes", None)
    if processes is None:  # a server without background processes
        return
    store = SandboxStore(services.store)

    async def hook(_info: Any, subject: Subject) -> LaunchExtras | None:
        if await store.get(subject.tenant, subject.session) is None:
            return None
        node = services.nodes.get(subject.node)
        workspace = await asyncio.to_thread(node.verify, subject.tenant, subject.session)
        return LaunchExtras(mounts=(BindMount(source=str(workspace), target=HOME,
                                              read_only=False),))

    processes.launch_hooks.append(hook)


def process_app(services: Callable[[], Services]) -> ProcessASGIApplication:
    return ProcessASGIApplication(ProcessService(services, PidTable()))  # type: ignore[arg-type]
