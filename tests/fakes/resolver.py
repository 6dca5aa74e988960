"""The egress proxies' resolver in tests: `localhost` → 127.0.0.1 only, every lookup recorded.

Tests hand it to the proxies so that no test can ever make a DNS query, even with a
protection switched off; `calls` lets a test say "refused before any lookup".
"""

from __future__ import annotations

import ipaddress
import socket

from runtime.egress.rules import IPAddress


class LoopbackOnlyResolver:
    def __init__(self) -> None:
        self.calls: list[str] = []

    async def __call__(self, host: str, port: int) -> list[IPAddress]:
        self.calls.append(host)
        if host == "localhost":
            return [ipaddress.ip_address("127.0.0.1")]
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
