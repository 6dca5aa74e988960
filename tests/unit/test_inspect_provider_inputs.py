"""The inspect_ai provider's input handling, in-process (create_app + FakeBackend over
httpx's ASGITransport; no engine): file names that mean something in a URL stay file
names, and an environment variable name is a whole name."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from runtime.bridges.inspect_sandbox import NaviSandboxEnvironment
from runtime.client import AsyncNaviClient
from tests.unit.test_api_roles import Api, api  # noqa: F401


async def _sandbox(api: Api) -> tuple[NaviSandboxEnvironment, httpx.AsyncClient]:  # noqa: F811
    tenant = await api.tenant("alpha")
    token = (await api.mint(tenant, "user"))["token"]
    client = api.client(token)
    resp = await client.post("/v1/sessions", json={})
    assert resp.status_code == 201, resp.text
    navi = AsyncNaviClient("http://navi.test", token,
                           transport=httpx.ASGITransport(app=api.app))
    return NaviSandboxEnvironment(navi, resp.json()["id"]), client


async def test_file_names_with_url_characters_are_the_files_named(
        api: Api, tmp_path: Path) -> None:  # noqa: F811
    env, client = await _sandbox(api)
    try:
        names = ["what?.txt", "a#b.txt", "100%.txt", "sub/x?y=1"]
        for i, name in enumerate(names):
            await env.write_file(name, f"content {i}")
        for i, name in enumerate(names):
            assert await env.read_file(f"/workspace/{name}") == f"content {i}", name
        listed = (await client.get(f"/v1/sessions/{env.session}/files")).json()
        assert sorted(e["path"] for e in listed) == sorted(names)
    finally:
        await client.aclose()
        await env.client.aclose()


async def test_an_env_name_with_a_newline_is_refused(api: Api) -> None:  # noqa: F811
    env, client = await _sandbox(api)
    try:
        with pytest.raises(ValueError, match="not an environment variable name"):
            await env.exec(["true"], env={"FOO\n": "x"})
    finally:
        await client.aclose()
        await env.client.aclose()
