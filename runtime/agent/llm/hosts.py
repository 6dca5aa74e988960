"""Which model host to try next: the configured order, minus hosts that failed recently.

A host that fails (refused connection, timeout, 5xx) is skipped for `blacklist_s`; after
that it is tried again. When every host is blacklisted they are all tried anyway, the one
whose ban ends first leading, so a short outage of a single-host setup never turns into a
minute of refusals.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from urllib.parse import urlsplit

from runtime.errors import ConfigError


def parse_hosts(value: str | None, default: str = "http://127.0.0.1:11434") -> list[str]:
    """`NAVI_OLLAMA_HOST`: comma-separated; `host:port` gets `http://`; duplicates dropped."""
    hosts: list[str] = []
    for part in (value or default).split(","):
        part = part.strip().rstrip("/")
        if not part:
            continue
        if "://" not in part:
            part = "http://" + part
        split = urlsplit(part)
        if split.scheme not in ("http", "https") or not split.hostname:
            raise ConfigError(f"bad Ollama host {part!r}: expected http(s)://host[:port]")
        if part not in hosts:
            hosts.append(part)
    if not hosts:
        raise ConfigError("NAVI_OLLAMA_HOST names no host")
    return hosts


class HostPool:
    def __init__(self, hosts: list[str], blacklist_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not hosts:
            raise ConfigError("no model hosts configured")
        self.hosts = list(hosts)
        self.blacklist_s = blacklist_s
        self._clock = clock
        self._banned_until: dict[str, float] = {}

    def candidates(self) -> list[str]:
        """Hosts to try, in order: healthy ones first (configured order), then banned ones."""
        now = self._clock()
        healthy = [h for h in self.hosts if self._banned_until.get(h, 0.0) <= now]
        banned = sorted((h for h in self.hosts if h not in healthy),
                        key=lambda h: self._banned_until[h])
        return healthy + banned

    def failed(self, host: str) -> None:
        self._banned_until[host] = self._clock() + self.blacklist_s

    def succeeded(self, host: str) -> None:
        self._banned_until.pop(host, None)

    def banned(self) -> list[str]:
        now = self._clock()
        return [h for h, until in self._banned_until.items() if until > now]
