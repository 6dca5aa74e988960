"""The egress proxy against real loopback servers (no traffic leaves 127.0.0.1).

Names that must be refused are refused before any lookup (the resolver records every call);
allowed names are ``localhost`` only. The resolver is a fixed table (``localhost`` ->
127.0.0.1), so no test, even one run with a protection switched off, ever sends a DNS query.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import re
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from runtime.egress import EgressConfig, EgressProxy, egress_proxy, system_resolver
from runtime.egress.report import MAX_DESTINATIONS, EgressLedger
from runtime.egress.rules import IPAddress
from tests.fakes.resolver import LoopbackOnlyResolver


def open_proxy(
    allow: list[str], config: EgressConfig, directory: Path, *,
    resolver: LoopbackOnlyResolver | None = None,
) -> contextlib.AbstractAsyncContextManager[EgressProxy]:
    return egress_proxy(allow, config, directory, resolver=resolver or LoopbackOnlyResolver())


async def test_the_system_resolver_reads_localhost_from_the_hosts_file() -> None:
    assert ipaddress.ip_address("127.0.0.1") in await system_resolver("localhost", 80)


class Upstream:
    """A loopback TCP server: echoes (tunnel tests) or answers one HTTP request."""

    def __init__(self) -> None:
        self.heads: list[bytes] = []
        self.server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> Upstream:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            first = await reader.read(4)
            if first in (b"GET ", b"POST"):
                head = first + await reader.readuntil(b"\r\n\r\n")
                self.heads.append(head)
                body = b"hello from upstream"
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
            else:
                writer.write(first)
                while data := await reader.read(65536):
                    writer.write(data)
                    await writer.drain()
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def upstream() -> AsyncIterator[Upstream]:
    server = await Upstream().start()
    yield server
    assert server.server is not None
    server.server.close()


def config_for(upstream: Upstream, **overrides: object) -> EgressConfig:
    return EgressConfig(ports=(upstream.port,), allow_loopback=True, **overrides)  # type: ignore[arg-type]


async def ask(proxy: EgressProxy, head: str) -> tuple[bytes, asyncio.StreamReader,
                                                      asyncio.StreamWriter]:
    path = proxy.socket_path
    assert path is not None
    if len(str(path)) < 100:
        reader, writer = await asyncio.open_unix_connection(str(path))
    else:  # as the proxy binds it: through the directory's fd
        dirfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            reader, writer = await asyncio.open_unix_connection(
                f"/proc/self/fd/{dirfd}/{path.name}")
        finally:
            os.close(dirfd)
    writer.write(head.encode())
    status = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    return status, reader, writer


async def test_connect_tunnels_bytes_to_an_allowed_name(tmp_path: Path, upstream: Upstream) -> None:
    async with open_proxy(["localhost"], config_for(upstream), tmp_path) as proxy:
        status, reader, writer = await ask(
            proxy, f"CONNECT localhost:{upstream.port} HTTP/1.1\r\nHost: x\r\n\r\n")
        assert status.startswith(b"HTTP/1.1 200")
        writer.write(b"ping through the tunnel")
        assert await asyncio.wait_for(reader.readexactly(23), 5) == b"ping through the tunnel"
        writer.close()
    report = proxy.report()
    assert report.allowed == 1 and report.refused == 0 and report.bytes_out == 23
    assert report.destinations[0].host == "localhost"
    assert "allowed localhost" in report.summary()


async def test_plain_http_is_forwarded_in_origin_form(tmp_path: Path, upstream: Upstream) -> None:
    async with open_proxy(["localhost"], config_for(upstream), tmp_path) as proxy:
        _, reader, writer = await ask(
            proxy, f"GET http://LOCALHOST:{upstream.port}/a/b?c=1 HTTP/1.1\r\n"
            "Host: evil.example\r\nProxy-Authorization: secret\r\nProxy-Connection: keep-alive"
            "\r\nUser-Agent: t\r\n\r\n")
        assert await reader.readexactly(19) == b"hello from upstream"
        writer.close()
    head = upstream.heads[0].decode()
    assert head.startswith("GET /a/b?c=1 HTTP/1.1\r\n")
    assert f"Host: LOCALHOST:{upstream.port}\r\n" in head and "evil.example" not in head
    assert "Proxy-" not in head and "Connection: close" in head and "User-Agent: t" in head


async def test_a_name_not_allowed_is_refused_before_any_lookup(
    tmp_path: Path, upstream: Upstream
) -> None:
    """Red if the allowlist check is skipped (the name would be looked up)."""
    resolver = LoopbackOnlyResolver()
    with capture_logs() as logs:
        async with open_proxy(["localhost"], config_for(upstream), tmp_path,
                                resolver=resolver) as proxy:
            for target in (f"not-allowed.invalid:{upstream.port}",
                           f"127.0.0.1:{upstream.port}", f"[::1]:{upstream.port}",
                           f"localhost.evil.invalid:{upstream.port}", "localhost:22"):
                status, _, writer = await ask(proxy, f"CONNECT {target} HTTP/1.1\r\n\r\n")
                assert status.startswith(b"HTTP/1.1 403"), (target, status)
                writer.close()
    assert resolver.calls == [] and proxy.report().lookups == 0
    assert proxy.report().refused == 5 and upstream.heads == []
    refused = [e for e in logs if e["event"] == "egress_refused"]
    assert [e["reason"] for e in refused][:2] == ["host not in the allowlist",
                                                  "IP address not in the allowlist"]


async def test_loopback_is_refused_unless_the_test_setting_is_on(
    tmp_path: Path, upstream: Upstream
) -> None:
    """Red if resolved addresses were not checked: localhost is allowlisted by name."""
    config = EgressConfig(ports=(upstream.port,))  # allow_loopback off: production
    async with open_proxy(["localhost", "127.0.0.1"], config, tmp_path) as proxy:
        for target in ("localhost", "127.0.0.1"):
            status, reader, writer = await ask(
                proxy, f"CONNECT {target}:{upstream.port} HTTP/1.1\r\n\r\n")
            assert status.startswith(b"HTTP/1.1 403"), status
            assert b"loopback" in await reader.read()
            writer.close()
    assert proxy.report().allowed == 0


async def test_unresolvable_and_bad_requests(tmp_path: Path, upstream: Upstream) -> None:
    async with open_proxy(["nothing.invalid", "localhost"], config_for(upstream),
                            tmp_path) as proxy:
        status, _, w = await ask(proxy, f"CONNECT nothing.invalid:{upstream.port} HTTP/1.1\r\n\r\n")
        assert status.startswith(b"HTTP/1.1 502")
        w.close()
        for bad in ("GET /relative HTTP/1.1\r\n\r\n", "CONNECT localhost HTTP/1.1\r\n\r\n",
                    "GET https://localhost/ HTTP/1.1\r\n\r\n", "BREW http://localhost/ HTTP/1.1"
                    "\r\n\r\n", "GET http://u@localhost/ HTTP/1.1\r\n\r\n"):
            status, _, w = await ask(proxy, bad)
            assert status.startswith(b"HTTP/1.1 400"), bad
            w.close()
        status, _, w = await ask(proxy, "CONNECT localhost:1 HTTP/1.1\r\nX: "
                                 + "a" * 20000 + "\r\n\r\n")
        assert status.startswith(b"HTTP/1.1 431")
        w.close()


async def test_connections_are_bounded(tmp_path: Path, upstream: Upstream) -> None:
    config = config_for(upstream, max_connections=2)
    async with open_proxy(["localhost"], config, tmp_path) as proxy:
        opened = [await ask(proxy, f"CONNECT localhost:{upstream.port} HTTP/1.1\r\n\r\n")
                  for _ in range(2)]
        status, _, w = await ask(proxy, f"CONNECT localhost:{upstream.port} HTTP/1.1\r\n\r\n")
        assert status.startswith(b"HTTP/1.1 503")
        w.close()
        for _, _, writer in opened:
            writer.close()


async def test_idle_tunnels_are_closed_and_close_cuts_the_rest(
    tmp_path: Path, upstream: Upstream
) -> None:
    config = config_for(upstream, idle_s=0.3)
    async with open_proxy(["localhost"], config, tmp_path) as proxy:
        status, reader, w1 = await ask(proxy, f"CONNECT localhost:{upstream.port} HTTP/1.1\r\n\r\n")
        assert status.startswith(b"HTTP/1.1 200")
        assert await asyncio.wait_for(reader.read(), 3) == b""  # closed by the idle timeout
        w1.close()
        proxy.config = proxy.config.model_copy(update={"idle_s": 60.0})
        _, reader2, w2 = await ask(proxy, f"CONNECT localhost:{upstream.port} HTTP/1.1\r\n\r\n")
        path = proxy.socket_path
    assert await asyncio.wait_for(reader2.read(), 3) == b""  # cut by close()
    w2.close()
    assert path is not None and not path.exists()


async def test_the_socket_is_private_on_the_host_and_long_paths_work(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 120)
    async with open_proxy(["localhost"], EgressConfig(), deep) as proxy:
        assert proxy.socket_path is not None and proxy.socket_path.parent == deep
        assert len(str(proxy.socket_path)) > 108
        assert stat.S_ISSOCK(os.lstat(proxy.socket_path).st_mode)
        assert stat.S_IMODE(os.stat(deep).st_mode) == 0o700
        status, _, w = await ask(proxy, "CONNECT elsewhere.invalid:443 HTTP/1.1\r\n\r\n")
        assert status.startswith(b"HTTP/1.1 403")
        w.close()


async def test_refused_names_cannot_push_the_allowed_host_out(
        tmp_path: Path, upstream: Upstream) -> None:
    """Red with one cap for both verdicts (localhost dropped), without the report's
    allowed-first order, and with the old line (no fields; first-seen order, cut at 600)."""
    refused = [f"{'x' * 60}.{'y' * 60}.n{i}.example" for i in range(MAX_DESTINATIONS + 6)]
    async with open_proxy(["localhost"], config_for(upstream), tmp_path) as proxy:
        for name in refused:  # first: every one refused before any lookup
            status, _, writer = await ask(proxy, f"CONNECT {name}:{upstream.port} HTTP/1.1\r\n\r\n")
            assert status.startswith(b"HTTP/1.1 403")
            writer.close()
        status, reader, writer = await ask(
            proxy, f"CONNECT localhost:{upstream.port} HTTP/1.1\r\nHost: x\r\n\r\n")
        assert status.startswith(b"HTTP/1.1 200")
        writer.write(b"ping")
        assert await asyncio.wait_for(reader.readexactly(4), 5) == b"ping"
        writer.close()
    report = proxy.report()
    assert report.allowed == 1 and report.refused == len(refused)
    assert report.destinations[0].host == "localhost"  # kept, and listed first
    assert sum(d.verdict == "refused" for d in report.destinations) == MAX_DESTINATIONS
    assert report.dropped == len(refused) - MAX_DESTINATIONS

    line = report.summary()
    assert len(line) <= 600
    head = (f"egress: allowed=1 refused={len(refused)} bytes_out=4 bytes_in=4; "
            f"allowed localhost:{upstream.port} x1; refused {refused[0]}:{upstream.port} x1 (")
    assert line.startswith(head), line
    more = re.fullmatch(r".*; \+(\d+) more", line)
    assert more is not None
    listed = line.count("; refused ")
    assert listed + int(more.group(1)) == len(refused)  # every refused name listed or counted


def test_a_line_without_connections_says_so_in_its_fields() -> None:
    assert EgressLedger(["a.example"]).report().summary() == (
        "egress: allowed=0 refused=0 bytes_out=0 bytes_in=0")


async def test_a_cluster_address_is_refused_before_any_connect(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Red if the proxy does not refuse its cluster's machines: ``node.cluster.test`` is
    allowlisted, a private host (so the range check passes it) and resolves to 203.0.113.7
    (TEST-NET-3, a cluster node with a public address here). Any connect the proxy tries is
    caught below and refused, so not even the mutant sends a packet off this machine."""
    node = ipaddress.ip_address("203.0.113.7")
    tried: list[object] = []

    async def no_connect(host: object, *args: object, **kwargs: object) -> object:
        tried.append(host)
        raise OSError("this test never connects")

    async def resolver(host: str, port: int) -> list[IPAddress]:
        return [node] if host == "node.cluster.test" else []

    monkeypatch.setattr(asyncio, "open_connection", no_connect)
    config = EgressConfig(ports=(443,), private_hosts=("node.cluster.test",))
    async with egress_proxy(["node.cluster.test", "203.0.113.7"], config, tmp_path,
                            resolver=resolver,
                            denied=lambda: frozenset({node})) as proxy:
        for target in ("node.cluster.test:443", "203.0.113.7:443"):
            status, reader, writer = await ask(proxy, f"CONNECT {target} HTTP/1.1\r\n\r\n")
            assert status.startswith(b"HTTP/1.1 403"), (target, status)
            assert b"cluster address" in await reader.read()
            writer.close()
    assert tried == [] and proxy.report().allowed == 0 and proxy.report().refused == 2


def test_names_made_up_under_a_wildcard_cannot_push_an_allowed_host_out() -> None:
    """A program allowed `*.cdn.example` connects to 200 names under it before the host that
    matters: that host is still in the report and the audit line, the 200 as one entry."""
    ledger = EgressLedger(["api.example.org", "*.cdn.example"])
    for i in range(200):
        ledger.record(f"n{i:03d}-{'z' * 20}.cdn.example", 443, "allowed")
    ledger.record("api.example.org", 443, "allowed")
    ledger.record("evil.example", 443, "refused", "host not in the allowlist")
    report = ledger.report()
    assert report.allowed == 201 and report.dropped == 0
    assert any(d.host == "api.example.org" for d in report.destinations)
    line = report.summary()
    assert len(line) <= 600, line
    assert "; allowed api.example.org:443 x1" in line
    assert "; allowed *.cdn.example:443 x200 (" in line
    assert "; refused evil.example:443 x1 (host not in the allowlist)" in line
