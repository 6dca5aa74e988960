"""Where a client connects and how: the URL and token (arguments, else `NAVI_URL` and
`NAVI_TOKEN`), the headers and timeouts both clients use, and the checks an answer's status
line and headers get before its body is read."""

from __future__ import annotations

import os

import httpx

from navi_client.errors import NaviClientError, ResponseTooLarge

TIMEOUT = httpx.Timeout(600.0, connect=30.0)  # an exec may run for minutes
STREAM_TIMEOUT = httpx.Timeout(30.0, read=None)  # an event stream is quiet for as long as it is


def stream_timeout(read: float | None) -> httpx.Timeout:
    return STREAM_TIMEOUT if read is None else httpx.Timeout(30.0, read=read)


def base_url(url: str | None) -> str:
    url = (url or os.environ.get("NAVI_URL", "")).rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise NaviClientError("no server: pass url= or set NAVI_URL (e.g. http://127.0.0.1:8000)")
    return url


def headers(token: str | None, extra: dict[str, str] | None = None) -> dict[str, str]:
    token = token if token is not None else os.environ.get("NAVI_TOKEN", "")
    out = {"Authorization": f"Bearer {token}"} if token else {}
    return {**out, **(extra or {})}


def check_size(resp: httpx.Response, max_bytes: int | None) -> None:
    if max_bytes is None:
        return
    length = resp.headers.get("content-length", "")
    if length.isascii() and length.isdigit() and int(length) > max_bytes:
        raise ResponseTooLarge(int(length), max_bytes)


def last_event_headers(last_event_id: int | None) -> dict[str, str]:
    return {} if last_event_id is None else {"Last-Event-ID": str(last_event_id)}


def http_options(url: str | None, token: str | None, extra: dict[str, str] | None,
                 timeout: httpx.Timeout | float) -> dict[str, object]:
    """`httpx.Client`'s and `httpx.AsyncClient`'s arguments, the same for both."""
    return {"base_url": base_url(url), "headers": headers(token, extra), "timeout": timeout}
