"""The E2B bridge's small pure parts: E2B paths onto a session's two roots, the streamed
multipart parser of envd uploads, and how an SDK command becomes one shell command line."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from runtime.e2b.home import navi_cwd
from runtime.e2b.paths import resolve, shown
from runtime.e2b.pids import PidTable, Started
from runtime.e2b.process import command_of
from runtime.e2b.store import SandboxRecord, SandboxStore
from runtime.e2b.uploads import MAX_PARTS, parts
from runtime.e2b.vendor.envd import process_pb as pb
from runtime.errors import InvalidInput, InvalidPath, NotFound
from runtime.store import Store


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


async def _sandboxes(path: Path, count: int) -> tuple[Store, list[str]]:
    store = await Store.open(path)
    tenant = await store.create_tenant("t")
    made = []
    for _ in range(count):
        session = await store.create_session(tenant.id, "developer")
        await SandboxStore(store).create(SandboxRecord(
            session_id=session.id, tenant_id=tenant.id, template="base", metadata={},
            envs={}, started_at=0, end_at=1))
        made.append(session.id)
    return store, made


async def test_pids_are_per_sandbox_and_kept_in_the_store(tmp_path: Path) -> None:
    store, (s1, s2, s3) = await _sandboxes(tmp_path / "navi.sqlite3", 3)
    table = PidTable(store)
    config = pb.ProcessConfig(cmd="/bin/bash", args=["-l", "-c", "sleep 9"], cwd="/tmp")
    one = await table.add(s1, Started("p_1", config, "web"))
    two = await table.add(s2, Started("p_2", pb.ProcessConfig(), None))
    assert one == two == 1001  # the same number in two sandboxes: two processes
    assert await table.add(s1, Started("p_3", pb.ProcessConfig(), None)) == 1002
    assert (await table.find(s2, pb.ProcessSelector(selector=_pid(two))))[1].process_id == "p_2"
    assert (await table.find(s1, pb.ProcessSelector(selector=_tag("web"))))[0] == one
    with pytest.raises(Exception, match="not found"):
        await table.find(s1, pb.ProcessSelector(selector=_pid(1003)))
    with pytest.raises(Exception, match="not found"):
        await table.find(s3, pb.ProcessSelector(selector=_pid(one)))
    await store.close()
    again = await Store.open(tmp_path / "navi.sqlite3")  # a restarted server
    pid, started = await PidTable(again).find(s1, pb.ProcessSelector(selector=_pid(one)))
    assert (pid, started.process_id, started.tag, started.config) == (one, "p_1", "web", config)
    await PidTable(again).forget(s1, [one])
    assert list(await PidTable(again).of_sandbox(s1)) == [1002]
    await again.close()


async def test_a_sandbox_keeps_its_newest_pids(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from runtime.e2b import pids

    monkeypatch.setattr(pids, "KEEP_PIDS", 500)
    store, (s1,) = await _sandboxes(tmp_path / "navi.sqlite3", 1)
    table = PidTable(store)
    for n in range(1001, 2001):
        await table.add(s1, Started(f"p_{n}", pb.ProcessConfig(), None))
    kept = await table.of_sandbox(s1)
    assert min(kept) == 1501 and max(kept) == 2000
    await store.close()


async def test_contexts_are_kept_in_the_store(tmp_path: Path) -> None:
    store, (s1, s2) = await _sandboxes(tmp_path / "navi.sqlite3", 2)
    await SandboxStore(store).add_context(s1, "abc", "ctx-abc")
    await store.close()
    again = SandboxStore(await Store.open(tmp_path / "navi.sqlite3"))
    assert await again.contexts(s1) == ["abc"] and await again.contexts(s2) == []
    assert await again.context_kernel(s1, "abc") == "ctx-abc"
    assert await again.context_kernel(s2, "abc") is None
    await again.remove_context(s1, "abc")
    assert await again.count_contexts(s1) == 0
    await again.store.close()


def _pid(pid: int):  # type: ignore[no-untyped-def]
    from protobuf import Oneof

    return Oneof("pid", pid)


def _tag(tag: str):  # type: ignore[no-untyped-def]
    from protobuf import Oneof

    return Oneof("tag", tag)
