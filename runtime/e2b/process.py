"""envd's `process.Process` Connect service on Navi's background processes.

The wire has no background flag: `commands.run(...)` with or without `background=True` is
the same `Start` stream, so every command is a Navi process (`services.processes`: a fresh
hardened container of its own, decided as `process_start` and audited `process.start` with
the command's SHA-256; the command reaches the container by stdin, never on a command line).
Closing the stream never stops it; it ends when it exits, is killed, or reaches the policy's
`max_lifetime_s`. E2B's integer pids map to Navi's `p_...` ids per sandbox
(`runtime.e2b.pids`, in the store: a restarted server still knows them). Its cwd, HOME and
workspace are `/home/user` (`runtime.e2b.home`). Output replayed from the log keeps its
stream (stderr stays stderr). PTYs, resizing and client-streamed input are not offered
(UNIMPLEMENTED with a message).
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, cast

from connectrpc.code import Code
from connectrpc.errors import ConnectError
from connectrpc.request import RequestContext
from protobuf import Oneof

from runtime.e2b.auth import SandboxCaller, sandbox_caller
from runtime.e2b.bounds import MAX_ENVS, check_map
from runtime.e2b.errors import connect_error
from runtime.e2b.home import navi_cwd
from runtime.e2b.pids import PidTable, Started
from runtime.e2b.vendor.envd import process_pb as pb
from runtime.e2b.vendor.envd.process_connect import ProcessASGIApplication
from runtime.errors import NaviError

if TYPE_CHECKING:
    from runtime.e2b.deps import BridgeDeps

KEEPALIVE_S = 20.0
SIGNALS = {pb.Signal.SIGKILL: "KILL", pb.Signal.SIGTERM: "TERM"}
NO_PTY = "PTY sessions are not offered by Navi's E2B API: use commands.run() instead"


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


def _event(kind: str, value: Any) -> pb.ProcessEvent:
    return pb.ProcessEvent(event=cast(Any, Oneof(kind, value)))


def _start_event(pid: int) -> pb.ProcessEvent:
    return _event("start", pb.ProcessEvent.StartEvent(pid=pid))


class ProcessService:
    def __init__(self, services: Callable[[], BridgeDeps]) -> None:
        self._services = services

    @property
    def pids(self) -> PidTable:
        return PidTable(self._services().store)

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
        pid = await self.pids.add(caller.session.id, Started(info.id, config, request.tag or None))
        yield pb.StartResponse(event=_start_event(pid))
        async for event in self._follow(processes, subject, info.id, 0):
            yield pb.StartResponse(event=event)

    def connect(self, request: pb.ConnectRequest, ctx: RequestContext[Any, Any]
                ) -> AsyncIterator[pb.ConnectResponse]:
        return self._connect(request, ctx)

    async def _connect(self, request: pb.ConnectRequest, ctx: RequestContext[Any, Any]
                       ) -> AsyncIterator[pb.ConnectResponse]:
        caller, processes = await self._caller(ctx)
        pid, started = await self.pids.find(caller.session.id, request.process)
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
        known = await self.pids.of_sandbox(caller.session.id)
        found = [pb.ProcessInfo(config=s.config, pid=pid, tag=s.tag)
                 for pid, s in known.items() if s.process_id in running]
        await self.pids.forget(caller.session.id,
                               [pid for pid, s in known.items() if s.process_id not in running])
        return pb.ListResponse(processes=found)

    async def send_input(self, request: pb.SendInputRequest, ctx: RequestContext[Any, Any]
                         ) -> pb.SendInputResponse:
        caller, processes = await self._caller(ctx)
        _, started = await self.pids.find(caller.session.id, request.process)
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
        _, started = await self.pids.find(caller.session.id, request.process)
        name = SIGNALS.get(request.signal)
        if name is None:
            raise ConnectError(Code.INVALID_ARGUMENT, "only SIGTERM and SIGKILL can be sent")
        try:
            if name == "KILL":  # the SDK's kill(): answer once it has ended, as envd's list shows
                await processes.stop(await caller.subject(), started.process_id, name)
            else:
                await processes.signal(await caller.subject(), started.process_id, name)
        except NaviError as exc:
            raise connect_error(exc) from None
        return pb.SendSignalResponse()

    async def close_stdin(self, request: pb.CloseStdinRequest, ctx: RequestContext[Any, Any]
                          ) -> pb.CloseStdinResponse:
        caller, processes = await self._caller(ctx)
        _, started = await self.pids.find(caller.session.id, request.process)
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


def process_app(services: Callable[[], BridgeDeps]) -> ProcessASGIApplication:
    return ProcessASGIApplication(ProcessService(services))  # type: ignore[arg-type]
