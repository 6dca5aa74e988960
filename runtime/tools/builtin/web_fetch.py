"""The fetcher of `http_request` and `web_view`: runs INSIDE the sandbox, never in the supervisor.

`runtime/tools/builtin/web.py` sends this file's source as `python3 -I -c SOURCE` to a fresh
python-image container with an egress grant; the job arrives as JSON on stdin, the answer
leaves as one JSON object on stdout. Standard library only (the image has nothing else).
urllib reaches the network only through `HTTP(S)_PROXY`, the call's allowlisting proxy.

Job: {mode: "request"|"view", url, method, headers, body, timeout_s, allowlist,
max_redirects, max_body_bytes, max_chars, max_output}.
Answer: {ok, status, reason, url, headers, body | title/text/links, truncated, elapsed_ms,
redirects, content_type} or {ok: false, error: CODE, message}. Exit 0 when ok, 1 otherwise.

Redirects are followed by hand (at most `max_redirects`); each Location must stay http(s)
and on the allowlist, else the answer is `redirect_refused` without connecting (the proxy
would refuse it too). An answer of the proxy itself (`X-Navi-Egress: refused`, or a refused
CONNECT for https) is `egress_refused`.
"""

from __future__ import annotations

import codecs
import http.client
import ipaddress
import json
import re
import socket
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from html.parser import HTMLParser
from typing import Any

REDIRECTS = (301, 302, 303, 307, 308)
CHUNK = 64 * 1024
MAX_HEADERS_OUT = 64
TEXTUAL = ("json", "xml", "javascript", "ecmascript", "x-www-form-urlencoded", "yaml", "csv")


class Failed(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def host_allowed(host: str, allowlist: list[str]) -> bool:
    """The proxy's name rule: exact (case-insensitive, trailing dot ignored), `*.d` below d;
    an IP literal only when listed as such."""
    name = host.lower().removesuffix(".")
    try:
        name = str(ipaddress.ip_address(name.strip("[]")))
        return name in {e.lower() for e in allowlist}
    except ValueError:
        pass
    for entry in allowlist:
        entry = entry.lower()
        if entry.startswith("*.") and name.endswith(entry[1:]):
            return True
        if entry == name:
            return True
    return False


class _Answer(urllib.request.HTTPErrorProcessor):
    """Every status is an answer (no HTTPError, and so no automatic redirect)."""

    def http_response(self, request, response):  # type: ignore[no-untyped-def]
        return response

    https_response = http_response


def _read(response: http.client.HTTPResponse, cap: int, deadline: float) -> tuple[bytes, bool]:
    data = bytearray()
    while len(data) <= cap:
        if time.monotonic() > deadline:
            raise Failed("timeout", "the response took longer than the timeout")
        chunk = response.read(min(CHUNK, cap + 1 - len(data)))
        if not chunk:
            break
        data += chunk
    return bytes(data[:cap]), len(data) > cap


def _next_hop(url: str, status: int, location: str, method: str, body: bytes | None,
              allowlist: list[str]) -> tuple[str, str, bytes | None]:
    target = urllib.parse.urljoin(url, location.strip())
    parts = urllib.parse.urlsplit(target)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise Failed("redirect_refused", f"redirect to {target[:300]!r}: not an http(s) URL")
    if "@" in parts.netloc:
        raise Failed("redirect_refused", f"redirect to {target[:300]!r}: carries credentials")
    if not host_allowed(parts.hostname, allowlist):
        raise Failed("redirect_refused",
                     f"redirect to {parts.hostname[:255]} refused: not in the egress allowlist "
                     f"({', '.join(allowlist)})")
    if status == 303 or (status in (301, 302) and method == "POST"):
        method, body = ("HEAD" if method == "HEAD" else "GET"), None
    return urllib.parse.urlunsplit(parts._replace(fragment="")), method, body


def fetch(job: dict[str, Any]) -> dict[str, Any]:
    started = time.monotonic()
    deadline = started + float(job["timeout_s"])
    url, method = job["url"], job["method"]
    body = job["body"].encode("utf-8") if job.get("body") is not None else None
    headers = {"Accept-Encoding": "identity", "User-Agent": "navi-web/1", **job["headers"]}
    if body is not None and not any(k.lower() == "content-type" for k in headers):
        headers["Content-Type"] = "text/plain; charset=utf-8"
    opener = urllib.request.build_opener(_Answer)
    redirects: list[str] = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise Failed("timeout", "the request took longer than the timeout")
        request = urllib.request.Request(url, data=body, method=method, headers=headers)
        try:
            response = opener.open(request, timeout=left)
        except urllib.error.URLError as exc:
            raise _network_failure(url, exc.reason) from None
        except (OSError, http.client.HTTPException) as exc:
            raise _network_failure(url, exc) from None
        status = response.status
        if response.headers.get("X-Navi-Egress") == "refused":
            text = response.read(4096).decode("utf-8", "replace").strip()
            raise Failed("egress_refused", text or f"the egress proxy answered {status}")
        location = response.headers.get("Location")
        if status in REDIRECTS and location:
            response.close()
            if len(redirects) >= job["max_redirects"]:
                raise Failed("too_many_redirects",
                             f"more than {job['max_redirects']} redirects (last: {url[:300]})")
            url, method, body = _next_hop(url, status, location, method, body, job["allowlist"])
            if body is None:
                headers = {k: v for k, v in headers.items() if k.lower() != "content-type"}
            redirects.append(url)
            continue
        break
    try:
        raw, truncated = (b"", False) if method == "HEAD" else _read(
            response, job["max_body_bytes"], deadline)
    except (OSError, http.client.HTTPException) as exc:
        raise _network_failure(url, exc) from None
    finally:
        response.close()
    answer = {
        "ok": status < 400, "status": status, "reason": response.reason, "url": url,
        "headers": [[k, v[:2048]] for k, v in list(response.headers.items())[:MAX_HEADERS_OUT]],
        "content_type": response.headers.get_content_type(), "truncated": truncated,
        "body_bytes": len(raw), "redirects": redirects,
        "elapsed_ms": int((time.monotonic() - started) * 1000),
    }
    text, charset, binary = decode(raw, response.headers)
    answer.update(charset=charset, binary=binary)
    if job["mode"] == "view":
        if binary:
            raise Failed("not_text", f"{url[:300]} is {answer['content_type']}, not a page")
        if answer["content_type"] in ("text/html", "application/xhtml+xml"):
            page = html_to_text(text, url, job["max_chars"])
        else:
            page = {"title": "", "text": text[: job["max_chars"]], "links": [],
                    "cut": len(text) > job["max_chars"]}
        answer.update(title=page["title"], text=page["text"], links=page["links"])
        answer["truncated"] = truncated or page["cut"]
    else:
        answer["body"] = "" if binary else text
    if not answer["ok"]:
        answer.update(error="http_status", message=f"HTTP {status} {response.reason}")
    return answer


def _network_failure(url: str, exc: object) -> Failed:
    text = str(exc)
    if "Tunnel connection failed" in text:
        return Failed("egress_refused", f"the egress proxy refused the connection ({text})")
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return Failed("timeout", "the request took longer than the timeout")
    return Failed("network", f"{url[:300]}: {type(exc).__name__}: {text[:300]}")


_META_CHARSET = re.compile(rb"""<meta[^>]+charset=["']?([A-Za-z0-9_.:-]{1,40})""", re.I)


def decode(raw: bytes, headers: http.client.HTTPMessage) -> tuple[str, str, bool]:
    """(text, charset used, binary?) by the header's charset, a <meta> one, else UTF-8."""
    ctype = headers.get_content_type()
    charset = headers.get_content_charset()
    if charset is None and "html" in ctype:
        found = _META_CHARSET.search(raw[:4096])
        charset = found.group(1).decode("ascii") if found else None
    textual = ctype.startswith("text/") or any(t in ctype for t in TEXTUAL)
    try:
        if charset is None or not codecs.lookup(charset)._is_text_encoding:
            charset = None
    except LookupError:
        charset = None
    if charset is None:
        try:
            return raw.decode("utf-8"), "utf-8", False
        except UnicodeDecodeError:
            if not textual:
                return "", "", True
            charset = "utf-8"
    return raw.decode(charset, errors="replace"), charset, False


DROP = {"script", "style", "nav", "noscript", "template", "svg", "head", "iframe", "object"}
BLOCK = {"p", "div", "section", "article", "main", "header", "footer", "aside", "ul", "ol",
         "table", "tr", "blockquote", "pre", "form", "figure", "figcaption", "dl", "dt", "dd",
         "address", "hr", "h1", "h2", "h3", "h4", "h5", "h6", "li", "br", "details", "summary"}
MAX_LINKS = 200


class _Text(HTMLParser):
    """HTML -> readable text: headings as `#`, list items as `- `, paragraph breaks kept,
    script/style/nav dropped, links numbered `[n]` and listed at the end."""

    def __init__(self, base: str) -> None:
        super().__init__(convert_charrefs=True)
        self.base = base
        self.out: list[str] = []
        self.title: list[str] = []
        self.in_title = False
        self.drop = 0
        self.pre = 0
        self.link: tuple[str, list[str]] | None = None
        self.links: list[list[str]] = []
        self.numbers: dict[str, int] = {}

    def _break(self, text: str = "\n\n") -> None:
        self.out.append(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self.in_title = True
        if tag == "body":
            self.drop = 0  # an unclosed <head> (HTML lets </head> be left out) ends here
        if tag in DROP:
            self.drop += 1
            return
        if tag == "base":
            href = dict(attrs).get("href")
            if href:
                self.base = urllib.parse.urljoin(self.base, href)
        if self.drop:
            return
        if tag in ("br", "li"):
            self._break("\n")
            if tag == "li":
                self.out.append("- ")
        elif tag in BLOCK:
            self._break()
            if tag[0] == "h" and tag[1:].isdigit():
                self.out.append("#" * int(tag[1]) + " ")
        if tag == "pre":
            self.pre += 1
        if tag == "a":
            href = dict(attrs).get("href") or ""
            self.link = (href, [])

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("br", "hr") and not self.drop:
            self._break("\n" if tag == "br" else "\n\n")
        elif tag == "base":
            self.handle_starttag(tag, attrs)

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self.in_title = False
        if tag in DROP:
            self.drop = max(0, self.drop - 1)
            return
        if self.drop:
            return
        if tag == "pre":
            self.pre = max(0, self.pre - 1)
        if tag == "a" and self.link is not None:
            self._close_link()
        elif tag in BLOCK and tag != "li":
            self._break()

    def _close_link(self) -> None:
        assert self.link is not None
        href, words = self.link
        self.link = None
        url = urllib.parse.urljoin(self.base, href.strip())
        url = urllib.parse.urlsplit(url)._replace(fragment="").geturl()
        if not url.startswith(("http://", "https://")):
            return
        label = " ".join(" ".join(words).split())
        if url not in self.numbers:
            if len(self.links) >= MAX_LINKS:
                return
            self.links.append([label or url, url])
            self.numbers[url] = len(self.links)
        self.out.append(f" [{self.numbers[url]}]")

    def handle_data(self, data: str) -> None:
        if self.in_title:
            self.title.append(data)
        if self.drop:
            return
        text = data if self.pre else re.sub(r"\s+", " ", data)
        self.out.append(text)
        if self.link is not None:
            self.link[1].append(data)

    def text(self) -> str:
        lines = [line.strip() for line in "".join(self.out).split("\n")]
        return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def html_to_text(page: str, base: str, max_chars: int) -> dict[str, Any]:
    parser = _Text(base)
    parser.feed(page)
    parser.close()
    if parser.link is not None:
        parser._close_link()
    text = parser.text()
    cut = len(text) > max_chars
    return {"title": " ".join(" ".join(parser.title).split())[:500], "text": text[:max_chars],
            "links": parser.links, "cut": cut}


def encode_fitting(answer: dict[str, Any], limit: int) -> bytes:
    """The answer as UTF-8 JSON of at most `limit` bytes: the long text is cut to fit."""
    field = "body" if "body" in answer else "text"
    for _ in range(12):
        data = json.dumps(answer, ensure_ascii=False).encode("utf-8", "replace")
        if len(data) <= limit:
            return data
        text = answer.get(field) or ""
        if text:  # characters are not bytes: cut in proportion, with some room
            answer[field] = text[: max(0, int(len(text) * limit / len(data)) - 64)]
        elif answer.get("links"):
            answer["links"] = answer["links"][: len(answer["links"]) // 2]
        else:
            answer["headers"] = answer.get("headers", [])[: len(answer.get("headers", [])) // 2]
        answer["truncated"] = True
    return json.dumps({"ok": False, "error": "too_large",
                       "message": "the answer does not fit the output limit"}).encode()


def main() -> int:
    job = json.loads(sys.stdin.buffer.read())
    try:
        answer = fetch(job)
    except Failed as exc:
        answer = {"ok": False, "error": exc.code, "message": exc.message}
    sys.stdout.buffer.write(encode_fitting(answer, int(job["max_output"])))
    sys.stdout.buffer.flush()
    return 0 if answer["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
