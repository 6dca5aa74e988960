"""The arguments of `http_request` and `web_view`, checked in the supervisor before anything runs.

A URL, headers and a body come from the model (untrusted). Here they are held to what the
in-container fetcher (`web_fetch.py`) may send: http/https only, no userinfo, at most 2048
characters, header names that are tokens and values without CR/LF/NUL (no header injection),
none of the headers the fetcher or the proxy own (hop-by-hop, `Proxy-*`, `Host`,
`Content-Length`, `Accept-Encoding`), a text body of at most `MAX_BODY_BYTES`.

`egress_problem(url, allowlist)` is the policy engine's own check of a URL against the
egress grant (`runtime.policy.egress_grant`, the proxy's name rules); the engine applies it
to an `Action`'s `hosts`, so a host the proxy would refuse is denied before anything starts.
"""

from __future__ import annotations

import re
from typing import Literal
from urllib.parse import SplitResult, quote, urlsplit, urlunsplit

from pydantic import Field, field_validator, model_validator

from runtime.policy.egress_grant import host_refusal
from runtime.tools.base import ToolParams

MAX_URL_CHARS = 2048
MAX_HEADERS = 32
MAX_HEADER_VALUE = 4096
MAX_BODY_BYTES = 256 * 1024
DEFAULT_TIMEOUT_S = 20.0
MAX_TIMEOUT_S = 120.0
MAX_VIEW_CHARS = 100_000

_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}$")
_CONTROL = re.compile(r"[\x00-\x20\x7f]")
# Owned by the fetcher or the proxy, or hop-by-hop (RFC 9110 7.6.1): never from the caller.
FORBIDDEN_HEADERS = frozenset({
    "host", "connection", "keep-alive", "te", "trailer", "transfer-encoding", "upgrade",
    "content-length", "accept-encoding", "expect", "proxy-connection",
})


def normalize_url(value: str) -> str:
    """The URL to fetch (fragment dropped, non-ASCII in path and query percent-encoded), or
    ValueError saying what is wrong."""
    if not isinstance(value, str) or not value:
        raise ValueError("url must be a non-empty string")
    if len(value) > MAX_URL_CHARS:
        raise ValueError(f"url is longer than {MAX_URL_CHARS} characters")
    if _CONTROL.search(value):
        raise ValueError("url contains spaces or control characters (percent-encode them)")
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"url is not valid: {exc}") from None
    if parts.scheme.lower() not in ("http", "https"):
        raise ValueError("url must start with http:// or https://")
    if "@" in parts.netloc:
        raise ValueError("url may not contain credentials (user:password@)")
    host = parts.hostname or ""
    if not host:
        raise ValueError("url has no host")
    if not host.isascii():
        raise ValueError("url host must be ASCII (use the punycode xn-- form of the name)")
    if port == 0:
        raise ValueError("url port 0 is not valid")
    path = quote(parts.path, safe="/%:@!$&'()*+,;=-._~") or "/"
    query = quote(parts.query, safe="/?%:@!$&'()*+,;=-._~")
    fixed = SplitResult(parts.scheme.lower(), parts.netloc, path, query, "")
    url = urlunsplit(fixed)
    if len(url) > MAX_URL_CHARS:
        raise ValueError(f"url is longer than {MAX_URL_CHARS} characters once encoded")
    return url


def url_host_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return host, port


def egress_problem(url: str, allowlist: list[str]) -> str | None:
    """Why the policy's egress grant does not cover `url`'s host, or None when it does."""
    return host_refusal(url_host_port(url)[0], allowlist)


class WebParamsBase(ToolParams):
    url: str = Field(description="http:// or https:// URL (at most 2048 characters, no "
                     "user:password@); its host must be on the policy's egress allowlist")
    timeout_s: float = Field(DEFAULT_TIMEOUT_S, gt=0, le=MAX_TIMEOUT_S,
                             description="seconds for the whole request, redirects included")

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        return normalize_url(value)


class HttpRequestParams(WebParamsBase):
    method: Literal["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"] = Field(
        "GET", description="HTTP method")
    headers: dict[str, str] = Field(
        default_factory=dict, description="extra request headers (at most 32; not Host, "
        "Connection, Proxy-*, Content-Length, Transfer-Encoding, Accept-Encoding)")
    body: str | None = Field(None, description="request body as text (UTF-8, at most 256 KiB); "
                             "set Content-Type in headers (default text/plain)")

    @field_validator("headers")
    @classmethod
    def _headers(cls, value: dict[str, str]) -> dict[str, str]:
        if len(value) > MAX_HEADERS:
            raise ValueError(f"at most {MAX_HEADERS} headers")
        seen: set[str] = set()
        for name, text in value.items():
            if not _TOKEN.fullmatch(name):
                raise ValueError(f"header name {name[:40]!r} is not a valid token")
            lower = name.lower()
            if lower in FORBIDDEN_HEADERS or lower.startswith("proxy-"):
                raise ValueError(f"header {name!r} may not be set (the fetcher owns it)")
            if lower in seen:
                raise ValueError(f"header {name!r} given twice")
            seen.add(lower)
            if any(c in text for c in "\r\n\x00"):
                raise ValueError(f"header {name!r} contains CR, LF or NUL")
            if len(text) > MAX_HEADER_VALUE:
                raise ValueError(f"header {name!r} is longer than {MAX_HEADER_VALUE}")
            try:
                text.encode("latin-1")
            except UnicodeEncodeError:
                raise ValueError(f"header {name!r} has characters HTTP cannot carry") from None
        return value

    @field_validator("body")
    @classmethod
    def _body(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            size = len(value.encode("utf-8"))
        except UnicodeEncodeError:
            raise ValueError("body is not valid text (lone surrogate)") from None
        if size > MAX_BODY_BYTES:
            raise ValueError(f"body is larger than {MAX_BODY_BYTES} bytes")
        return value

    @model_validator(mode="after")
    def _body_needs_a_method(self) -> HttpRequestParams:
        if self.body is not None and self.method in ("GET", "HEAD"):
            raise ValueError(f"a {self.method} request takes no body (use POST, PUT or PATCH)")
        return self


class WebViewParams(WebParamsBase):
    max_chars: int = Field(20_000, ge=500, le=MAX_VIEW_CHARS,
                           description="longest page text returned (then cut, truncated: true)")
