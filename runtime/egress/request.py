"""The one proxy request a connection opens with: parsed strictly, bounded, never trusted.

Two forms are accepted (RFC 9110 / 9112):

* ``CONNECT host:port HTTP/1.1`` (authority-form): a tunnel, what HTTPS clients send;
* ``GET http://host[:port]/path HTTP/1.1`` (absolute-form, any common method): plain HTTP,
  forwarded as origin-form (``GET /path``) with ``Host`` set to the URL's authority,
  ``Proxy-*``/``Connection``/``Keep-Alive`` dropped and ``Connection: close`` added, so the
  upstream connection carries exactly this request (the program's next one opens a new
  connection and is decided again).

Anything else (``https://`` in absolute-form, origin-form, HTTP/0.9, obs-fold, bad bytes) is
a ``BadRequest``; the head must fit in ``max_header_bytes``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"})
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "proxy-authorization",
                        "proxy-authenticate", "te", "trailer", "upgrade"})
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_AUTHORITY = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[^\[\]:/?#@\s]+)(?::([0-9]{1,5}))?$")
MAX_HEADERS = 100


class BadRequest(ValueError):
    """The request head is malformed or unsupported (answered 400)."""


@dataclass(frozen=True)
class ProxyRequest:
    method: str
    host: str  # as written (brackets stripped from a v6 literal)
    port: int
    path: str = ""  # absolute-form only: origin-form target
    headers: tuple[tuple[str, str], ...] = ()
    version: str = "HTTP/1.1"

    @property
    def tunnel(self) -> bool:
        return self.method == "CONNECT"

    def upstream_head(self) -> bytes:
        """The head sent upstream for a forwarded (non-CONNECT) request."""
        authority = f"[{self.host}]" if ":" in self.host else self.host
        if self.port != 80:
            authority += f":{self.port}"
        lines = [f"{self.method} {self.path} {self.version}", f"Host: {authority}"]
        lines += [f"{k}: {v}" for k, v in self.headers
                  if k.lower() not in HOP_BY_HOP and k.lower() != "host"]
        lines.append("Connection: close")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def split_authority(text: str, default_port: int | None) -> tuple[str, int]:
    match = _AUTHORITY.fullmatch(text)
    if match is None:
        raise BadRequest(f"bad authority {text[:100]!r}")
    host, port_text = match.group(1), match.group(2)
    if port_text is None:
        if default_port is None:
            raise BadRequest("CONNECT needs host:port")
        port = default_port
    else:
        port = int(port_text)
    if not 0 < port < 65536:
        raise BadRequest(f"bad port {port}")
    return host.removeprefix("[").removesuffix("]"), port


def parse_head(head: bytes) -> ProxyRequest:
    """Parse a request head (request line + headers, ending in an empty line)."""
    try:
        text = head.decode("ascii")
    except UnicodeDecodeError as exc:
        raise BadRequest("the request head is not ASCII") from exc
    lines = text.split("\r\n")
    while lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise BadRequest("empty request")
    parts = lines[0].split(" ")
    if len(parts) != 3 or parts[2] not in ("HTTP/1.1", "HTTP/1.0"):
        raise BadRequest(f"bad request line {lines[0][:100]!r}")
    method, target, version = parts
    headers: list[tuple[str, str]] = []
    if len(lines) - 1 > MAX_HEADERS:
        raise BadRequest("too many header fields")
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not _TOKEN.fullmatch(name) or any(c in value for c in "\r\n\x00"):
            raise BadRequest(f"bad header line {line[:100]!r}")
        headers.append((name, value.strip()))
    if method == "CONNECT":
        host, port = split_authority(target, None)
        return ProxyRequest(method=method, host=host, port=port, version=version)
    if method not in METHODS:
        raise BadRequest(f"method {method[:20]!r} is not supported")
    if not target.lower().startswith("http://"):
        raise BadRequest("only CONNECT and absolute http:// requests are proxied "
                         "(use CONNECT for https)")
    rest = target[len("http://"):]
    cut = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
    authority, path = rest[:cut], rest[cut:]
    if "@" in authority:
        raise BadRequest("user information in the URL is not supported")
    host, port = split_authority(authority, 80)
    if not path.startswith("/"):
        path = "/" + path
    if any(c in path for c in " \t\x00"):
        raise BadRequest("bad request target")
    return ProxyRequest(method=method, host=host, port=port, path=path,
                        headers=tuple(headers), version=version)
