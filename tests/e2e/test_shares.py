"""`share_file` and `content_publish` against a real `navi serve`: the link works without a
token, with the file's type, as an attachment, `nosniff`; it is counted, listed, revocable
(then 404 with the error envelope), audited (`file.share`, `file.publish`, `share.revoke`),
dies with its session, and its token never reaches the server's log. Published HTML is
shown only on an origin of its own (the API answers 307 there), under a sandbox CSP that
gives its scripts no way to the API."""

from __future__ import annotations

from typing import Any

import httpx

from tests.e2e.conftest import Server

HTML = b"<!doctype html><title>r</title><h1>report</h1><script>fetch('/v1/sessions')</script>"


def _session(server: Server) -> tuple[str, str, str]:
    tenant, token = server.tenant_with_user()
    with server.client(token) as user:
        session = user.post("/v1/sessions", json={}).json()["id"]
    return tenant, token, session


def _call(user: httpx.Client, session: str, tool: str, **args: Any) -> dict[str, Any]:
    resp = user.post(f"/v1/sessions/{session}/exec", json={"tool": tool, "args": args})
    assert resp.status_code == 200, resp.text
    body: dict[str, Any] = resp.json()
    return body


def _on_origin(url: httpx.URL, method: str = "GET", path: str = "/") -> httpx.Response:
    return httpx.request(method, f"http://127.0.0.1:{url.port}{path}",
                         headers={"Host": url.netloc.decode()}, timeout=30)


def _gone(resp: httpx.Response) -> None:
    assert resp.status_code == 404, resp.text
    assert resp.json()["error"]["code"] == "not_found"


def test_a_shared_file_downloads_without_a_token_until_revoked(server: Server) -> None:
    tenant, token, session = _session(server)
    with server.client(token) as user:
        user.put(f"/v1/sessions/{session}/files/out/report.csv", content=b"a,b\n1,2\n")
        made = _call(user, session, "share_file", path="out/report.csv", expires_in_s=3600)
        assert made["ok"], made
        shared = made["metadata"]["shared"]
        url = shared["url"]
        assert url.startswith("/v1/shared/") and len(url.rsplit("/", 1)[1]) >= 43
        with server.client() as anyone:  # no Authorization header at all
            got = anyone.get(url)
            assert got.status_code == 200, got.text
            assert got.content == b"a,b\n1,2\n"
            assert got.headers["content-type"].startswith("text/csv")
            assert got.headers["content-disposition"].startswith("attachment; ")
            assert "report.csv" in got.headers["content-disposition"]
            assert got.headers["x-content-type-options"] == "nosniff"
            anyone.get(url)
            _gone(anyone.get(url[:-2] + "xx"))  # a token one character off
        [listed] = user.get(f"/v1/sessions/{session}/shares").json()
        assert listed["id"] == shared["id"] and listed["downloads"] == 2
        assert listed["kind"] == "share" and listed["path"] == "out/report.csv"
        assert "token" not in listed and "url" not in listed
        assert user.delete(f"/v1/sessions/{session}/shares/{shared['id']}").status_code == 204
        _gone(user.delete(f"/v1/sessions/{session}/shares/{shared['id']}"))
        assert user.get(f"/v1/sessions/{session}/shares").json() == []
        with server.client() as anyone:
            _gone(anyone.get(url))
    with server.client(server.token_for(tenant, "auditor")) as auditor:
        records = auditor.get("/v1/audit", params={"session": session}).json()
    actions = [(r["action"], r["object"]) for r in records if r["kind"] == "action"]
    assert ("file.share", "out/report.csv") in actions
    assert ("share.revoke", shared["id"]) in actions
    token_part = url.rsplit("/", 1)[1]
    assert token_part not in server.log()
    assert "/v1/shared/[token]" in server.log()


def test_a_deleted_sessions_links_die_with_it(server: Server) -> None:
    _, token, session = _session(server)
    with server.client(token) as user:
        user.put(f"/v1/sessions/{session}/files/a.txt", content=b"x")
        url = _call(user, session, "share_file", path="a.txt")["metadata"]["shared"]["url"]
        assert user.delete(f"/v1/sessions/{session}").status_code == 204
    with server.client() as anyone:
        _gone(anyone.get(url))


def test_a_shared_file_made_unreadable_or_replaced_is_gone(server: Server) -> None:
    """The link's one answer for a file it can no longer give is 404 (the module's promise):
    not 403 `permission_denied` for a file the sandbox made unreadable, nor 400
    `invalid_path` for one it turned into a symlink or a directory: an anonymous holder
    of the link learns nothing about what became of the file."""
    _, token, session = _session(server)
    with server.client(token) as user:
        urls = {}
        for name in ("hidden.txt", "in-locked/f.txt", "link.txt", "dir.txt"):
            user.put(f"/v1/sessions/{session}/files/{name}", content=b"x")
            urls[name] = _call(user, session, "share_file", path=name)["metadata"]["shared"]["url"]
        ran = _call(user, session, "terminal", command=(
            "chmod 000 hidden.txt && chmod 000 in-locked && rm link.txt && "
            "ln -s /etc/passwd link.txt && rm dir.txt && mkdir dir.txt"))
        assert ran["ok"], ran
    with server.client() as anyone:
        for name, url in urls.items():
            resp = anyone.get(url)
            assert resp.status_code == 404 and resp.json()["error"]["code"] == "not_found", (
                name, resp.text)


def test_share_refuses_what_it_cannot_share(server: Server) -> None:
    _, token, session = _session(server)
    with server.client(token) as user:
        missing = user.post(f"/v1/sessions/{session}/exec",
                            json={"tool": "share_file", "args": {"path": "nope.txt"}})
        assert missing.status_code == 404, missing.text
        too_long = user.post(f"/v1/sessions/{session}/exec", json={
            "tool": "share_file", "args": {"path": "a", "expires_in_s": 8 * 86400}})
        assert too_long.status_code == 400, too_long.text
        _gone(user.get("/v1/shared/" + "A" * 43, headers={"Authorization": ""}))


def test_published_content_is_served_inline_under_a_sandbox_csp(server: Server) -> None:
    tenant, token, session = _session(server)
    png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32
    with server.client(token) as user:
        user.put(f"/v1/sessions/{session}/files/page.html", content=HTML)
        user.put(f"/v1/sessions/{session}/files/notes.md", content=b"# Title\n\n*hi*\n")
        user.put(f"/v1/sessions/{session}/files/plot.png", content=png)
        user.put(f"/v1/sessions/{session}/files/data.bin", content=b"\x00\x01")
        user.put(f"/v1/sessions/{session}/files/paper", content=b"%PDF-1.4\n%%EOF\n")
        pub = {name: _call(user, session, "content_publish", path=name)
               for name in ("page.html", "notes.md", "plot.png", "data.bin", "paper")}
    assert not pub["data.bin"]["ok"] and "not an image" in pub["data.bin"]["error"]
    kinds = {n: pub[n]["metadata"]["published"]["kind"] for n in ("page.html", "notes.md",
                                                                  "plot.png")}
    assert kinds == {"page.html": "html", "notes.md": "markdown", "plot.png": "image"}
    with server.client() as anyone:
        # an HTML page is never shown on the API's origin: 307 to its own on the preview
        # origin (``*.localhost``, resolved to loopback as a browser does)
        page_url = pub["page.html"]["metadata"]["published"]["url"]
        moved = anyone.get(page_url)
        assert moved.status_code == 307, moved.text
        own = httpx.URL(moved.headers["location"])
        assert own.host.endswith(".localhost") and own.port != httpx.URL(server.url).port
        assert own.path == "/" and page_url.rsplit("/", 1)[1] not in str(own)
        page = _on_origin(own)
        assert page.status_code == 200 and page.content == HTML
        assert page.headers["content-type"] == "text/html; charset=utf-8"
        csp = page.headers["content-security-policy"]
        assert csp.startswith("sandbox allow-scripts;") and "allow-same-origin" not in csp
        assert "connect-src 'none'" in csp and "default-src 'none'" in csp
        assert "content-disposition" not in page.headers
        image = anyone.get(pub["plot.png"]["metadata"]["published"]["url"])
        assert image.headers["content-type"] == "image/png" and image.content == png
        pdf = anyone.get(pub["paper"]["metadata"]["published"]["url"])
        assert pdf.headers["content-type"] == "application/pdf" and pdf.content.startswith(b"%PDF")
        md = anyone.get(pub["notes.md"]["metadata"]["published"]["url"])
        assert md.text.startswith("# Title") and md.headers["x-content-type-options"] == "nosniff"
        assert md.headers["content-security-policy"].startswith("sandbox;")
        # only a published page's own origin shows it: another label, path or method not
        other = httpx.URL(str(own).replace(own.host[:6], "aaaaaa", 1))
        assert _on_origin(other).status_code == 404
        assert _on_origin(own, path="/x").status_code == 404
        assert _on_origin(own, "POST").status_code == 405
        # a publish link is not a download link, and the other way round
        _gone(anyone.get(pub["page.html"]["metadata"]["published"]["url"].replace(
            "/v1/published/", "/v1/shared/")))
    with server.client(server.token_for(tenant, "auditor")) as auditor:
        records = auditor.get("/v1/audit", params={"session": session}).json()
    assert ("file.publish", "page.html") in [(r["action"], r["object"]) for r in records]
    with server.client(token) as user:  # revoked: its origin shows nothing more
        share_id = pub["page.html"]["metadata"]["published"]["id"]
        assert user.delete(f"/v1/sessions/{session}/shares/{share_id}").status_code == 204
    assert _on_origin(own).status_code == 404
