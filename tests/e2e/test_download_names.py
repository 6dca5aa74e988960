"""Downloads work for any file name (RFC 6266): `filename*` carries the name as UTF-8, what a
client reads back exactly (RFC 5987 ext-value); `filename` is an
ASCII stand-in. A name outside Latin-1 such as `€.txt` was a 500."""

from __future__ import annotations

import re
from urllib.parse import quote, unquote

import pytest

from tests.e2e.conftest import Server

NAMES = ["€.txt", 'a "quoted" name.txt', "semi;colon, comma.txt", "日本語 ファイル.md",
         "naïve café.txt", "party 🎉.txt", "100% done=yes.txt", "plain.txt", "'tick'.csv"]


@pytest.mark.parametrize("name", NAMES)
def test_a_download_of_any_name_carries_that_name(server: Server, name: str) -> None:
    _, token = server.tenant_with_user()
    with server.client(token) as user:
        session = user.post("/v1/sessions", json={}).json()["id"]
        path = f"/v1/sessions/{session}/files/dir/{quote(name, safe='')}"
        assert user.put(path, content=name.encode()).status_code in (200, 201)
        resp = user.get(path)
    assert resp.status_code == 200, resp.text
    assert resp.content == name.encode()
    header = resp.headers["content-disposition"]
    assert header.isascii() and header.startswith("attachment; ")
    (encoded,) = re.findall(r"; filename\*=UTF-8''([!#$&+\-.^_`|~0-9A-Za-z%]+)$", header)
    assert unquote(encoded, errors="strict") == name  # RFC 5987 ext-value, exactly the name
    (fallback,) = re.findall(r'; filename="([^"\\]*)";', header)
    assert fallback.isascii() and len(fallback) == len(name) and '"' not in fallback
    if name == "plain.txt":
        assert fallback == name
