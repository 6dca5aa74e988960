"""envd's `filesystem.Filesystem` Connect service over a session's files.

The SDK's `files.list/exists/get_info/remove/rename/make_dir` arrive here as Connect calls
(JSON or binary protobuf; the vendored stubs and `connectrpc` decode them). Each call is
authenticated by the sandbox's access token and served by `runtime.e2b.files`. Watching a
directory is not offered: those calls answer UNIMPLEMENTED with a message saying so.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from connectrpc.code import Code
from connectrpc.errors import ConnectError
from connectrpc.request import RequestContext
from protobuf.wkt.google.protobuf.timestamp_pb import Timestamp

from runtime.e2b.auth import sandbox_caller
from runtime.e2b.errors import connect_error
from runtime.e2b.files import Entry, SandboxFiles
from runtime.e2b.vendor.envd import filesystem_pb as pb
from runtime.e2b.vendor.envd.filesystem_connect import FilesystemASGIApplication
from runtime.errors import NaviError
from runtime.logging import get_logger

if TYPE_CHECKING:
    from runtime.e2b.deps import BridgeDeps

log = get_logger(__name__)
T = TypeVar("T")
NO_WATCH = ("watching directories is not offered by Navi's E2B API; poll with "
            "files.list() or files.get_info() instead")


def entry_info(entry: Entry) -> pb.EntryInfo:
    return pb.EntryInfo(
        name=entry.name,
        type=pb.FileType.DIRECTORY if entry.kind == "dir" else pb.FileType.FILE,
        path=entry.path, size=entry.size, mode=0o770 if entry.kind == "dir" else 0o660,
        permissions="drwxrwx---" if entry.kind == "dir" else "-rw-rw----",
        owner="user", group="user",
        modified_time=Timestamp.from_datetime(datetime.fromtimestamp(entry.mtime, UTC)))


async def mapped(call: Callable[[], Awaitable[T]]) -> T:
    """Navi's errors as Connect errors (the SDK maps their codes to its exceptions)."""
    try:
        return await call()
    except NaviError as exc:
        raise connect_error(exc) from None
    except ConnectError:
        raise
    except Exception as exc:  # never a dropped connection: the SDK gets an error
        log.exception("e2b_internal_error", error=repr(exc))
        raise ConnectError(Code.INTERNAL, "internal error") from None


class FilesystemService:
    def __init__(self, services: Callable[[], BridgeDeps]) -> None:
        self._services = services

    async def _files(self, ctx: RequestContext[Any, Any]) -> SandboxFiles:
        return SandboxFiles(await sandbox_caller(self._services(), ctx.request_headers))

    async def stat(self, request: pb.StatRequest, ctx: RequestContext[Any, Any]
                   ) -> pb.StatResponse:
        async def run() -> pb.StatResponse:
            files = await self._files(ctx)
            return pb.StatResponse(entry=entry_info(await files.stat(request.path)))
        return await mapped(run)

    async def make_dir(self, request: pb.MakeDirRequest, ctx: RequestContext[Any, Any]
                       ) -> pb.MakeDirResponse:
        async def run() -> pb.MakeDirResponse:
            files = await self._files(ctx)
            created, entry = await files.make_dir(request.path)
            if not created:
                raise ConnectError(Code.ALREADY_EXISTS, f"{request.path} already exists")
            return pb.MakeDirResponse(entry=entry_info(entry))
        return await mapped(run)

    async def move(self, request: pb.MoveRequest, ctx: RequestContext[Any, Any]
                   ) -> pb.MoveResponse:
        async def run() -> pb.MoveResponse:
            files = await self._files(ctx)
            entry = await files.move(request.source, request.destination)
            return pb.MoveResponse(entry=entry_info(entry))
        return await mapped(run)

    async def list_dir(self, request: pb.ListDirRequest, ctx: RequestContext[Any, Any]
                       ) -> pb.ListDirResponse:
        async def run() -> pb.ListDirResponse:
            files = await self._files(ctx)
            entries = await files.list_dir(request.path, request.depth or 1)
            return pb.ListDirResponse(entries=[entry_info(e) for e in entries])
        return await mapped(run)

    async def remove(self, request: pb.RemoveRequest, ctx: RequestContext[Any, Any]
                     ) -> pb.RemoveResponse:
        async def run() -> pb.RemoveResponse:
            files = await self._files(ctx)
            await files.remove(request.path)
            return pb.RemoveResponse()
        return await mapped(run)

    def watch_dir(self, request: pb.WatchDirRequest, ctx: RequestContext[Any, Any]
                  ) -> AsyncIterator[pb.WatchDirResponse]:
        raise ConnectError(Code.UNIMPLEMENTED, NO_WATCH)

    async def create_watcher(self, request: pb.CreateWatcherRequest,
                             ctx: RequestContext[Any, Any]) -> pb.CreateWatcherResponse:
        raise ConnectError(Code.UNIMPLEMENTED, NO_WATCH)

    async def get_watcher_events(self, request: pb.GetWatcherEventsRequest,
                                 ctx: RequestContext[Any, Any]
                                 ) -> pb.GetWatcherEventsResponse:
        raise ConnectError(Code.UNIMPLEMENTED, NO_WATCH)

    async def remove_watcher(self, request: pb.RemoveWatcherRequest,
                             ctx: RequestContext[Any, Any]) -> pb.RemoveWatcherResponse:
        raise ConnectError(Code.UNIMPLEMENTED, NO_WATCH)


def filesystem_app(services: Callable[[], BridgeDeps]) -> FilesystemASGIApplication:
    return FilesystemASGIApplication(FilesystemService(services))  # type: ignore[arg-type]
