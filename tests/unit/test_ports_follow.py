"""A kernel's relay follows the session's ports (``navi-ports --follow``), on loopback: the
real broker tells every ``WATCH`` connection the running ports as processes come and go,
and the real relay (run on the host around ``sleep``) listens on exactly those.
(Inside a kernel's container: tests/docker/test_ports_api.py.)"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from pathlib import Path

from runtime.ports.broker import CONNECT_SOCK, RELAY_NAME, SessionBroker
from tests.e2e.conftest import free_port
from tests.unit.test_ports_preview import kill_relays


def listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


async def until(check: object, within_s: float = 10) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if await asyncio.to_thread(check):  # type: ignore[arg-type]
            return True
        await asyncio.sleep(0.05)
    return False


async def line(reader: asyncio.StreamReader) -> bytes:
    return await asyncio.wait_for(reader.readline(), 5)


async def test_watchers_are_told_the_running_ports(tmp_path: Path) -> None:
    broker = SessionBroker("s_1", tmp_path / "s", tmp_path / "p")
    await broker.start()
    try:
        reader, writer = await asyncio.open_unix_connection(tmp_path / "s" / CONNECT_SOCK)
        writer.write(b"WATCH\n")
        assert await line(reader) == b"PORTS \n"
        await broker.add_process("p_1", (3001, 3000))
        assert await line(reader) == b"PORTS 3000,3001\n"
        await broker.add_process("p_2", (4000,))
        assert await line(reader) == b"PORTS 3000,3001,4000\n"
        await broker.remove_process("p_1", forget=True)
        assert await line(reader) == b"PORTS 4000\n"
        writer.close()
    finally:
        await broker.close(forget=True)


async def test_the_relay_listens_on_ports_as_they_come_and_go(tmp_path: Path) -> None:
    broker = SessionBroker("s_1", tmp_path / "s", tmp_path / "p")
    await broker.start()
    port = free_port()
    relay = subprocess.Popen([sys.executable, "-IS", str(tmp_path / "s" / RELAY_NAME),
                              "--follow", "--", "sleep", "60"])
    try:
        await asyncio.sleep(0.5)
        assert not listening(port)
        await broker.add_process("p_1", (port,))
        assert await until(lambda: listening(port)), "the relay did not listen on the port"
        await broker.remove_process("p_1", forget=True)
        assert await until(lambda: not listening(port)), "the relay kept the port"
    finally:
        relay.kill()
        relay.wait()
        kill_relays(tmp_path)
        await asyncio.sleep(0.2)  # a connection the relay made just before: accepted, ended
        await broker.close(forget=True)
