"""`PortsHub` without an engine: what a process container and a later call are given (mounts,
argv), that a session's containers get only their own session's sockets, that ids cannot
name a directory outside the hub, and ports outside 1024-65535 are refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.errors import InvalidInput, NotFound
from runtime.ports.hub import PORTS_TARGET, SERVE_TARGET, PortsHub
from runtime.sandbox.models import Invocation

A, B = "s_000000000000000a", "s_000000000000000b"


async def test_a_process_serves_its_ports_and_listens_on_the_sessions_others(
        tmp_path: Path) -> None:
    hub = PortsHub(tmp_path / "ports")
    try:
        call = Invocation(argv=["echo", "hi"])
        assert hub.for_call(A, call) == call  # no ports running: nothing added
        first = await hub.for_process(A, "p_1", [8000], Invocation(argv=["serve"]))
        assert first.argv[:3] == ["python3", "-IS", f"{PORTS_TARGET}/navi-ports"]
        assert first.argv[-2:] == ["--", "serve"] and "--listen" not in first.argv
        targets = {m.target: m.source for m in first.mounts}
        assert set(targets) == {PORTS_TARGET, SERVE_TARGET}
        assert all(m.read_only for m in first.mounts)
        assert (targets[SERVE_TARGET] / "serve.sock").is_socket()
        assert (targets[PORTS_TARGET] / "connect.sock").is_socket()
        assert (targets[PORTS_TARGET] / "navi-ports").is_file()
        # a second process reaches the first's port and serves its own
        second = await hub.for_process(A, "p_2", [9000], Invocation(argv=["other"]))
        assert second.argv[second.argv.index("--listen") + 1] == "8000"
        second_serve = {m.target: m.source for m in second.mounts}[SERVE_TARGET]
        assert second_serve != targets[SERVE_TARGET]  # each process its own serve socket
        # a later call of the session listens on both; one of another session on none
        later = hub.for_call(A, call)
        assert later.argv[later.argv.index("--listen") + 1] == "8000,9000"
        assert [m.target for m in later.mounts] == [PORTS_TARGET]  # no serve socket
        assert hub.for_call(B, call) == call
        assert hub.running_port(A, 9000) == "p_2" and hub.running_port(B, 9000) is None
        with pytest.raises(NotFound):
            await hub.open(B, 8000)
        # a process ends: its port and its serve directory go
        await hub.process_ended("p_2")
        assert hub.running_port(A, 9000) is None and not second_serve.exists()
        assert hub.for_call(A, call).argv[hub.for_call(A, call).argv.index("--listen") + 1] \
            == "8000"
        await hub.process_ended("p_1")
        assert hub.for_call(A, call) == call
    finally:
        await hub.close()


async def test_ids_and_ports_are_checked(tmp_path: Path) -> None:
    hub = PortsHub(tmp_path / "ports")
    try:
        for bad in ("..", "../x", "a/b", ""):
            with pytest.raises(InvalidInput):
                await hub.for_process(bad, "p_1", [8000], Invocation(argv=["x"]))
            with pytest.raises(InvalidInput):
                await hub.for_process(A, bad, [8000], Invocation(argv=["x"]))
        for port in (0, 80, 1023, 65536):
            with pytest.raises(InvalidInput):
                await hub.for_process(A, "p_1", [port], Invocation(argv=["x"]))
        assert not any((tmp_path / "ports").rglob("x"))
    finally:
        await hub.close()


async def test_a_session_cannot_hold_unbounded_connections(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    """Sandbox code can connect to its session's socket in a loop: past the cap the broker
    closes new connections at once instead of holding a descriptor for each."""
    import asyncio

    from runtime.ports import broker

    monkeypatch.setattr(broker, "MAX_CONNECTIONS", 8)
    hub = PortsHub(tmp_path / "ports")
    try:
        inv = await hub.for_process(A, "p_1", [8000], Invocation(argv=["x"]))
        sock = next(m.source for m in inv.mounts if m.target == PORTS_TARGET) / "connect.sock"
        held = [await asyncio.open_unix_connection(str(sock)) for _ in range(8)]
        await asyncio.sleep(0.1)
        reader, writer = await asyncio.open_unix_connection(str(sock))
        assert await asyncio.wait_for(reader.read(), 5) == b""  # closed by the broker
        writer.close()
        for _, w in held:
            w.close()
    finally:
        await hub.close()
