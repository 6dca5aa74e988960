"""The ports proxy and the preview origin, end to end on loopback: the process side is the
real relay (`runtime/ports/navi_ports.py`) run on the host around a real server
(tests/fakes/port_app.py), connected to the real broker sockets; the preview origin is the
real second uvicorn server. (The relay inside runc and gVisor sandboxes:
tests/docker/test_ports_relay.py.)"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from websockets.asyncio.client import connect

from runtime.errors import PortUnreachable
from runtime.ports.hub import PORTS_TARGET, SERVE_TARGET
from runtime.ports.service import PortsService
from tests.e2e.conftest import free_port

APP = Path(__file__).resolve().parents[1] / "fakes" / "port_app.py"
SESSION = "s_0000000000000001"
CREDENTIALS = {"Authorization": "Bearer navi_secret_token", "Cookie": "navi=1; other=2",
               "X-API-KEY": "k1", "X-Access-Token": "k2", "E2B-Traffic-Access-Token": "k3"}


class Rig:
    def __init__(self, ports: PortsService, tmp: Path) -> None:
        self.ports = ports
        self.tmp = tmp
        self.procs: list[subprocess.Popen[bytes]] = []
        self.alive = True

    async def token_alive(self, token_id: str) -> bool:
        return self.alive

    async def process(self, process_id: str, port: int, *, serve: bool = True) -> None:
        """A 'process' of SESSION declaring ``port``: the relay around the fake app."""
        relay = await self.ports.hub.relay_for_process(SESSION, process_id, [port])
        assert relay is not None
        mounts, prefix = relay
        where = {m.target: str(m.source) for m in mounts}
        argv = [a.replace(PORTS_TARGET, where[PORTS_TARGET]).replace(
            SERVE_TARGET, where.get(SERVE_TARGET, "")) for a in prefix]
        program = [sys.executable, str(APP), str(port)] if serve else ["sleep", "60"]
        self.procs.append(subprocess.Popen([*argv, *program]))
        if serve:
            for _ in range(100):
                with contextlib.suppress(PortUnreachable):
                    _, writer = await self.ports.hub.open(SESSION, port)
                    writer.close()
                    return
                await asyncio.sleep(0.05)
            pytest.fail("the port never answered")

    async def link(self, port: int, process_id: str = "p_1", expires_in_s: float = 60) -> str:
        link = await self.ports.links.create(tenant="t1", session=SESSION, port=port,
                                       process_id=process_id, token_id="tok",
                                       expires_in_s=expires_in_s)
        return self.ports.links.out(link).url

    @property
    def origin(self) -> str:
        assert self.ports.origin is not None
        return f"http://127.0.0.1:{self.ports.origin.port}"


def kill_relays(under: Path) -> None:
    """The relays started from ``under`` (detached: gone with a container in production,
    left running on the host here)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(a.endswith(b"/navi-ports") and str(under).encode() in a for a in argv):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(proc.name), signal.SIGKILL)


def host_of(url: str) -> str:
    return httpx.URL(url).netloc.decode()


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    holder: list[Rig] = []

    async def alive(token_id: str) -> bool:
        return await holder[0].token_alive(token_id)

    ports = PortsService(tmp_path / "ports", token_alive=alive)
    rig = Rig(ports, tmp_path)
    holder.append(rig)
    await ports.start(host="127.0.0.1", api_port=free_port(), preview_port=None,
                      preview_url=None)
    try:
        yield rig
    finally:
        for proc in rig.procs:
            proc.kill()
            proc.wait()
        kill_relays(tmp_path)
        await ports.close()


async def get(rig: Rig, url: str, path: str, **kw: object) -> httpx.Response:
    async with httpx.AsyncClient(timeout=10) as client:
        headers = {"Host": host_of(url), **kw.pop("headers", {})}  # type: ignore[dict-item]
        return await client.get(rig.origin + path, headers=headers, **kw)  # type: ignore[arg-type]


async def test_each_link_is_its_own_origin_and_credentials_never_pass(rig: Rig) -> None:
    port = free_port()
    await rig.process("p_1", port)
    one, two = await rig.link(port), await rig.link(port)
    assert one.startswith("http://") and ".localhost:" in one and one.endswith("/")
    assert host_of(one) != host_of(two)  # two links, two origins
    answer = await get(rig, one, "/headers", headers=CREDENTIALS)
    assert answer.status_code == 200
    assert answer.headers["x-content-type-options"] == "nosniff"
    seen = {k.lower() for k in answer.json()}
    assert not seen & {k.lower() for k in CREDENTIALS}, answer.json()
    assert {k.lower(): v for k, v in answer.json().items()}["host"] == f"127.0.0.1:{port}"


async def test_unknown_revoked_and_ended_links_are_404(rig: Rig) -> None:
    port = free_port()
    await rig.process("p_1", port)
    url = await rig.link(port)
    assert (await get(rig, url, "/x")).text == "hello /x"
    unknown = url.replace(host_of(url).split(".")[0], "a" * 26)
    assert (await get(rig, unknown, "/x")).status_code == 404
    link = rig.ports.links.list(SESSION, "t1")[0]
    await rig.ports.links.revoke(link)
    assert (await get(rig, url, "/x")).status_code == 404
    # its process ends: every link to it stops working
    url = await rig.link(port)
    await rig.ports.hub.process_ended("p_1")
    assert (await get(rig, url, "/x")).status_code == 404


async def test_a_link_ends_with_its_token_and_its_expiry(rig: Rig) -> None:
    port = free_port()
    await rig.process("p_1", port)
    url = await rig.link(port)
    assert (await get(rig, url, "/x")).status_code == 200
    rig.alive = False
    rig.ports.links.list(SESSION, "t1")[0].token_checked_at = 0  # the next re-check is due
    assert (await get(rig, url, "/x")).status_code == 404
    rig.alive = True
    short = await rig.link(port, expires_in_s=2)
    assert (await get(rig, short, "/x")).status_code == 200
    await asyncio.sleep(2.1)
    assert (await get(rig, short, "/x")).status_code == 404


async def test_service_workers_are_refused(rig: Rig) -> None:
    port = free_port()
    await rig.process("p_1", port)
    url = await rig.link(port)
    refused = await get(rig, url, "/sw.js", headers={"Service-Worker": "script"})
    assert refused.status_code == 403
    assert refused.headers["x-content-type-options"] == "nosniff"


async def test_nothing_listening_is_502(rig: Rig) -> None:
    port = free_port()
    await rig.process("p_1", port, serve=False)
    await asyncio.sleep(0.5)  # the relay is connected; nothing listens on the port
    answer = await get(rig, await rig.link(port), "/x")
    assert answer.status_code == 502 and "port_unreachable" in answer.text


async def test_sse_streams_through(rig: Rig) -> None:
    port = free_port()
    await rig.process("p_1", port)
    url = await rig.link(port)
    arrived: list[tuple[float, str]] = []
    async with httpx.AsyncClient(timeout=10) as client, client.stream(
            "GET", rig.origin + "/sse", headers={"Host": host_of(url)}) as answer:
        assert answer.headers["content-type"] == "text/event-stream"
        async for line in answer.aiter_lines():
            if line.startswith("data:"):
                arrived.append((time.time(), line))
    assert [line.split()[2] for _, line in arrived] == ["0", "1", "2"]
    # each event came when it was sent (0.2 s apart), not all at the end
    assert arrived[1][0] - arrived[0][0] > 0.1 and arrived[2][0] - arrived[1][0] > 0.1


async def test_websocket_passes_through(rig: Rig) -> None:
    port = free_port()
    await rig.process("p_1", port)
    url = await rig.link(port)
    assert rig.ports.origin is not None
    async with connect(f"ws://{host_of(url)}/ws", host="127.0.0.1",
                       port=rig.ports.origin.port) as ws:
        await ws.send("one")
        assert await ws.recv() == "echo: one"
        await ws.send("two" * 1000)
        assert await ws.recv() == "echo: " + "two" * 1000


async def test_post_bodies_and_keep_alive(rig: Rig) -> None:
    port = free_port()
    await rig.process("p_1", port)
    url = await rig.link(port)
    async with httpx.AsyncClient(timeout=10) as client:
        for i in range(5):
            answer = await client.post(rig.origin + "/echo", content=b"x" * (i * 100000),
                                       headers={"Host": host_of(url)})
            assert answer.status_code == 200 and len(answer.content) == i * 100000


async def test_the_preview_port_default_taken_explicit_and_template(tmp_path: Path) -> None:
    """API port + 1 by default, a free one when that is taken; a chosen port that is taken
    and a template without {link} refuse to start."""
    import socket

    from runtime.errors import ConfigError

    async def alive(token_id: str) -> bool:
        return True

    api = free_port()
    with socket.socket() as holder:
        try:
            holder.bind(("127.0.0.1", api + 1))
        except OSError:
            pytest.skip("the port after a free one is in use here")
        holder.listen()
        ports = PortsService(tmp_path / "a", token_alive=alive)
        await ports.start(host="127.0.0.1", api_port=api, preview_port=None, preview_url=None)
        try:
            assert ports.origin is not None and ports.origin.port != api + 1
            link = await ports.links.create(tenant="t", session=SESSION, port=2000, process_id="p",
                                      token_id="x", expires_in_s=60)
            assert ports.links.out(link).url.endswith(f".localhost:{ports.origin.port}/")
        finally:
            await ports.close()
        refused = PortsService(tmp_path / "b", token_alive=alive)
        with pytest.raises(ConfigError):
            await refused.start(host="127.0.0.1", api_port=api, preview_port=api + 1,
                                preview_url=None)
    with pytest.raises(ConfigError):
        await PortsService(tmp_path / "c", token_alive=alive).start(
            host="127.0.0.1", api_port=api, preview_port=None,
            preview_url="https://preview.example.org/")
    templated = PortsService(tmp_path / "d", token_alive=alive)
    await templated.start(host="127.0.0.1", api_port=api, preview_port=None,
                          preview_url="https://{link}.preview.example.org")
    try:
        link = await templated.links.create(tenant="t", session=SESSION, port=2000, process_id="p",
                                      token_id="x", expires_in_s=60)
        url = templated.links.out(link).url
        assert url == f"https://{link.label}.preview.example.org/"
    finally:
        await templated.close()
