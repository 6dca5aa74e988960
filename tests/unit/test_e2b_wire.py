"""The E2B bridge's small pure parts: E2B paths onto a session's two roots, the streamed
multipart parser of envd uploads, and how an SDK command becomes one shell command line."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest

from runtime.e2b.envd import process_pb as pb
from runtime.e2b.paths import resolve, shown
from runtime.e2b.process import PidTable, Started, command_of, navi_cwd
from runtime.e2b.uploads import MAX_PARTS, parts
from runtime.errors import InvalidInput, InvalidPath, NotFound


@pytest.mark.parametrize(("path", "expected"), [
    ("/home/user", ("workspace", "")),
    ("/home/user/", ("workspace", "")),
    ("/home/user/a/b.txt", ("workspace", "a/b.txt")),
    ("a/b.txt", ("workspace", "a/b.txt")),
    ("~/x", ("workspace", "x")),
    ("~", ("workspace", "")),
    ("/tmp", ("tmp", "")),
    ("/tmp/c", ("tmp", "c")),
    ("/home/user/./a", ("workspace", "a")),
])
def test_paths_map_onto_the_workspace_and_tmp(path: str, expected: tuple[str, str]) -> None:
    assert resolve(path) == expected


@pytest.mark.parametrize("path", ["/etc/passwd", "/", "/home/userx", "/home", "/workspace/a",
                                  "/tmpx/a", "/proc/self/environ"])
def test_other_absolute_paths_are_not_found(path: str) -> None:
    with pytest.raises(NotFound):
        resolve(path)


@pytest.mark.parametrize("path", ["/home/user/../../etc/passwd", "../x", "/tmp/../etc",
                                  "a\x00b", "/home/user/" + "a" * 5000])
def test_escapes_are_invalid(path: str) -> None:
    with pytest.raises(InvalidPath):
        resolve(path)


def test_shown_paths_are_absolute() -> None:
    assert shown("workspace", "a/b") == "/home/user/a/b"
    assert shown("tmp", "") == "/tmp"


async def _chunks(body: bytes, size: int) -> AsyncIterator[bytes]:
    for n in range(0, len(body), size):
        yield body[n:n + size]
        await asyncio.sleep(0)


def _multipart(files: list[tuple[str, bytes]]) -> tuple[str, bytes]:
    request = httpx.Request("POST", "http://x/files",
                            files=[("file", (name, data)) for name, data in files])
    return request.headers["content-type"], request.read()


async def _collect(content_type: str, body: bytes, size: int) -> list[tuple[str, bytes]]:
    got = []
    async for name, chunks in parts(content_type, _chunks(body, size)):
        got.append((name, b"".join([c async for c in chunks])))
    return got


@pytest.mark.parametrize("size", [1, 7, 64 * 1024])
async def test_multipart_parts_arrive_in_pieces(size: int) -> None:
    files = [("/home/user/a.txt", b"alpha\r\n--not-a-boundary"), ("b.bin", bytes(range(256)) * 9)]
    content_type, body = _multipart(files)
    assert await _collect(content_type, body, size) == files


async def test_multipart_part_count_is_bounded() -> None:
    content_type, body = _multipart([(f"f{n}", b"x") for n in range(MAX_PARTS + 2)])
    with pytest.raises(InvalidInput):
        await _collect(content_type, body, 1 << 20)


async def test_other_bodies_are_refused() -> None:
    with pytest.raises(InvalidInput):
        await _collect("application/json", b"{}", 10)


def test_the_sdks_bash_wrapper_becomes_the_command_itself() -> None:
    config = pb.ProcessConfig(cmd="/bin/bash", args=["-l", "-c", "echo hi | wc -c"])
    assert command_of(config) == "echo hi | wc -c"
    raw = pb.ProcessConfig(cmd="/usr/bin/python3", args=["-c", "print('a b')"])
    assert command_of(raw) == "/usr/bin/python3 -c 'print('\"'\"'a b'\"'\"')'"
    assert navi_cwd(None) == "/workspace" and navi_cwd("/home/user/d") == "/workspace/d"
    assert navi_cwd("/tmp/x") == "/tmp/x"


def test_pids_are_per_sandbox() -> None:
    table = PidTable()
    one = table.add("s1", Started("p_1", pb.ProcessConfig(), "web"))
    two = table.add("s2", Started("p_2", pb.ProcessConfig(), None))
    assert one == two  # the same number in two sandboxes: two processes
    assert table.find("s1", pb.ProcessSelector(selector=_pid(one)))[1].process_id == "p_1"
    assert table.find("s2", pb.ProcessSelector(selector=_pid(two)))[1].process_id == "p_2"
    assert table.find("s1", pb.ProcessSelector(selector=_tag("web")))[0] == one
    with pytest.raises(Exception, match="not found"):
        table.find("s1", pb.ProcessSelector(selector=_pid(one + 1)))
    with pytest.raises(Exception, match="not found"):
        table.find("s3", pb.ProcessSelector(selector=_pid(one)))


def _pid(pid: int):  # type: ignore[no-untyped-def]
    from protobuf import Oneof

    return Oneof("pid", pid)


def _tag(tag: str):  # type: ignore[no-untyped-def]
    from protobuf import Oneof

    return Oneof("tag", tag)
