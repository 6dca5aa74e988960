"""The real E2B SDK (sync, `e2b` 2.63 from PyPI) against a real `navi serve` on loopback,
configured only by E2B_API_URL / E2B_SANDBOX_URL / E2B_API_KEY (docs/e2b.md).

Control side (create, list, info, timeout, connect, kill), files (write, read, list,
exists, get_info, rename, make_dir, remove), the access-token rules, tenant isolation and
what Navi does not offer. Commands and the code interpreter are in
test_e2b_commands.py (they need the Docker engine)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator

import httpx
import pytest
from e2b import (
    AsyncSandbox,
    AuthenticationException,
    FileNotFoundException,
    NotFoundException,
    Sandbox,
    SandboxException,
)
from e2b.sandbox.filesystem.filesystem import FileType

from tests.e2e.conftest import Server, stop_server
from tests.e2e.e2b_server import audit, e2b_vars, start_e2b_server


@pytest.fixture(scope="module")
def navi(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_e2b_server(tmp_path_factory.mktemp("e2b"))
    yield srv
    stop_server(srv)


@pytest.fixture(scope="module")
def tenant(navi: Server) -> tuple[str, str]:
    return navi.tenant_with_user()


@pytest.fixture
def e2b_env(navi: Server, tenant: tuple[str, str]) -> Iterator[str]:
    """The three variables, as a user sets them (nothing else configures the SDK)."""
    with e2b_vars(navi, tenant[1]) as key:
        yield key


def test_lifecycle_create_info_list_timeout_connect_kill(
        navi: Server, tenant: tuple[str, str], e2b_env: str) -> None:
    sbx = Sandbox.create(metadata={"purpose": "test"}, envs={"GREETING": "hi"})
    try:
        assert sbx.is_running()
        info = sbx.get_info()
        assert info.sandbox_id == sbx.sandbox_id and info.template_id == "base"
        assert info.metadata == {"purpose": "test"}
        # a Navi session of the key's tenant
        with navi.client(e2b_env) as api:
            assert api.get(f"/v1/sessions/{sbx.sandbox_id}").status_code == 200
        listed = Sandbox.list().next_items()
        assert sbx.sandbox_id in [s.sandbox_id for s in listed]
        sbx.set_timeout(120)
        end = sbx.get_info().end_at.timestamp()
        assert 100 < end - time.time() <= 121
        again = Sandbox.connect(sbx.sandbox_id)
        again.files.write("hello.txt", "from a second client")
        assert sbx.files.read("/home/user/hello.txt") == "from a second client"
    finally:
        sbx.kill()
    assert not sbx.is_running()
    with pytest.raises(NotFoundException):
        Sandbox.get_info(sbx.sandbox_id)
    with navi.client(e2b_env) as api:
        assert api.get(f"/v1/sessions/{sbx.sandbox_id}").status_code == 404
    actions = [(r.get("action"), r.get("object")) for r in audit(navi, tenant[0])]
    assert ("session.create", sbx.sandbox_id) in actions
    assert ("session.delete", sbx.sandbox_id) in actions


def test_v1_sessions_are_not_sandboxes(navi: Server, e2b_env: str) -> None:
    with navi.client(e2b_env) as api:
        session = api.post("/v1/sessions", json={}).json()["id"]
    assert session not in [s.sandbox_id for s in Sandbox.list().next_items()]
    with pytest.raises(NotFoundException):
        Sandbox.get_info(session)
    Sandbox.kill(session)  # returns False, deletes nothing
    with navi.client(e2b_env) as api:
        assert api.get(f"/v1/sessions/{session}").status_code == 200


def test_the_timeout_deletes_the_sandbox_audited(navi: Server, tenant: tuple[str, str],
                                                 e2b_env: str) -> None:
    sbx = Sandbox.create(timeout=2)
    deadline = time.monotonic() + 15
    while sbx.is_running() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not sbx.is_running()
    records = [r for r in audit(navi, tenant[0]) if r.get("action") == "session.delete"
               and r.get("object") == sbx.sandbox_id]
    assert records and records[-1].get("detail") == "reason timeout", records


def test_files(e2b_env: str) -> None:
    sbx = Sandbox.create()
    try:
        info = sbx.files.write("/home/user/notes/a.txt", "alpha")
        assert info.path == "/home/user/notes/a.txt"
        sbx.files.write_files([{"path": "b.bin", "data": b"\x00\x01"},
                               {"path": "/tmp/c.txt", "data": "in tmp"}])
        assert sbx.files.read("notes/a.txt") == "alpha"
        assert bytes(sbx.files.read("/home/user/b.bin", format="bytes")) == b"\x00\x01"
        assert sbx.files.read("/tmp/c.txt") == "in tmp"
        names = {(e.name, e.type) for e in sbx.files.list("/home/user")}
        assert ("notes", FileType.DIR) in names and ("b.bin", FileType.FILE) in names
        deep = {e.path for e in sbx.files.list("/home/user", depth=2)}
        assert "/home/user/notes/a.txt" in deep
        assert sbx.files.exists("/home/user/notes/a.txt")
        assert not sbx.files.exists("/home/user/nope")
        got = sbx.files.get_info("/home/user/notes/a.txt")
        assert got.size == 5 and got.type == FileType.FILE
        assert sbx.files.make_dir("/home/user/empty") is True
        assert sbx.files.make_dir("/home/user/empty") is False
        assert sbx.files.get_info("/home/user/empty").type == FileType.DIR
        assert sbx.files.make_dir("/home/user/empty/inner") is True
        listed = {(e.name, e.type) for e in sbx.files.list("/home/user")}
        assert ("empty", FileType.DIR) in listed  # an empty directory is listed too
        assert ("inner", FileType.DIR) not in listed
        assert [(e.path, e.type) for e in sbx.files.list("/home/user/empty")] == [
            ("/home/user/empty/inner", FileType.DIR)]
        assert sbx.files.list("/home/user/empty/inner") == []
        moved = sbx.files.rename("/home/user/notes/a.txt", "/home/user/notes/z.txt")
        assert moved.path == "/home/user/notes/z.txt"
        assert not sbx.files.exists("/home/user/notes/a.txt")
        sbx.files.remove("/home/user/notes")
        assert not sbx.files.exists("/home/user/notes/z.txt")
        with pytest.raises(FileNotFoundException):
            sbx.files.read("/home/user/notes/z.txt")
        for outside in ("/etc/passwd", "/b.bin", "/workspace/b.bin"):
            with pytest.raises((FileNotFoundException, NotFoundException)):
                sbx.files.read(outside)  # only /home/user and /tmp are the session's
        with pytest.raises(SandboxException):
            sbx.files.read("/home/user/../../etc/passwd")
    finally:
        sbx.kill()


def test_wrong_key_is_the_sdks_authentication_error(e2b_env: str) -> None:
    with pytest.raises(AuthenticationException):
        Sandbox.create(api_key="navi_not_a_token")


def test_an_auditor_key_is_refused(navi: Server, tenant: tuple[str, str],
                                   e2b_env: str) -> None:
    auditor = navi.token_for(tenant[0], "auditor")
    with pytest.raises(SandboxException, match="may not use sandboxes"):
        Sandbox.create(api_key=auditor)
    with pytest.raises(SandboxException, match="may not use sandboxes"):
        Sandbox.list(api_key=auditor).next_items()


def test_another_tenants_sandbox_is_not_found(navi: Server, e2b_env: str) -> None:
    sbx = Sandbox.create()
    try:
        _, other_key = navi.tenant_with_user()
        with pytest.raises(NotFoundException):
            Sandbox.get_info(sbx.sandbox_id, api_key=other_key)
        with pytest.raises(NotFoundException):
            Sandbox.connect(sbx.sandbox_id, api_key=other_key)
        assert sbx.sandbox_id not in [
            s.sandbox_id for s in Sandbox.list(api_key=other_key).next_items()]
        Sandbox.kill(sbx.sandbox_id, api_key=other_key)
        assert sbx.is_running()
    finally:
        sbx.kill()


def test_the_sandbox_side_needs_its_own_access_token(navi: Server, e2b_env: str) -> None:
    first, second = Sandbox.create(), Sandbox.create()
    try:
        first.files.write("secret.txt", "mine")
        base = f"{navi.url}/e2b/files"
        params = {"path": "/home/user/secret.txt"}
        own = {"E2b-Sandbox-Id": first.sandbox_id, "E2b-Sandbox-Port": "49983"}
        assert httpx.get(base, params=params, headers=own).status_code == 401
        wrong = {**own, "X-Access-Token": second._envd_access_token or ""}
        assert httpx.get(base, params=params, headers=wrong).status_code == 401
        key = {**own, "X-API-KEY": e2b_env}  # the API key is not a sandbox token
        assert httpx.get(base, params=params, headers=key).status_code == 401
        right = {**own, "X-Access-Token": first._envd_access_token or ""}
        assert httpx.get(base, params=params, headers=right).text == "mine"
    finally:
        first.kill()
        second.kill()


def test_sandbox_calls_stop_when_the_key_is_revoked(navi: Server, tenant: tuple[str, str],
                                                    e2b_env: str) -> None:
    with navi.client(navi.admin_token) as admin:
        made = admin.post(f"/v1/tenants/{tenant[0]}/tokens", json={"role": "user"}).json()
    sbx = Sandbox.create(api_key=made["token"])
    sbx.files.write("x.txt", "1")
    with navi.client(navi.admin_token) as admin:
        assert admin.delete(f"/v1/tenants/{tenant[0]}/tokens/{made['id']}").status_code == 204
    with pytest.raises(AuthenticationException):
        sbx.files.read("x.txt")
    again = Sandbox.connect(sbx.sandbox_id)  # the tenant's live key may take it over
    assert again.files.read("x.txt") == "1"
    again.kill()


def test_unsupported_features_say_so(e2b_env: str) -> None:
    sbx = Sandbox.create()
    try:
        with pytest.raises(SandboxException, match="not offered"):
            sbx.pause()
        with pytest.raises(SandboxException, match="not offered"):
            sbx.files.watch_dir("/home/user")
        with pytest.raises(SandboxException, match="template"):
            Sandbox.create(template="my-custom-template")
    finally:
        sbx.kill()


def test_errors_are_e2bs_format(navi: Server, e2b_env: str) -> None:
    resp = httpx.get(f"{navi.url}/e2b/sandboxes/nope", headers={"X-API-KEY": e2b_env})
    assert resp.status_code == 404
    body = resp.json()
    assert body["code"] == 404 and isinstance(body["message"], str), json.dumps(body)
    resp = httpx.post(f"{navi.url}/e2b/v2/sandboxes", json={"templateID": 7},
                      headers={"X-API-KEY": e2b_env})
    assert resp.status_code == 400 and resp.json()["code"] == 400


def test_uploads_stream_under_the_upload_limit(e2b_env: str) -> None:
    sbx = Sandbox.create()
    try:
        chunk = b"x" * (1 << 20)
        sbx.files.write("/home/user/big.bin", iter([chunk] * 6))  # streamed: octet-stream
        assert sbx.files.get_info("/home/user/big.bin").size == 6 << 20
        with pytest.raises(SandboxException, match="413|limit|too large"):
            sbx.files.write("/home/user/huge.bin", iter([chunk] * 9))  # the policy's 8 MiB
        with pytest.raises(SandboxException, match="413|limit|too large"):
            sbx.files.write("/home/user/huge.bin", b"y" * (9 << 20))  # multipart
        assert not sbx.files.exists("/home/user/huge.bin")
    finally:
        sbx.kill()


def test_connect_rpc_json_codec(navi: Server, e2b_env: str) -> None:
    """The JSON codec works beside binary protobuf (E2B's JS SDK speaks JSON)."""
    sbx = Sandbox.create()
    try:
        sbx.files.write("j.txt", "json")
        resp = httpx.post(
            f"{navi.url}/e2b/filesystem.Filesystem/Stat", json={"path": "/home/user/j.txt"},
            headers={"Connect-Protocol-Version": "1", "E2b-Sandbox-Id": sbx.sandbox_id,
                     "X-Access-Token": sbx._envd_access_token or ""})
        assert resp.status_code == 200, resp.text
        entry = resp.json()["entry"]
        assert entry["name"] == "j.txt" and entry["type"] == "FILE_TYPE_FILE"
        assert entry["path"] == "/home/user/j.txt" and int(entry["size"]) == 4
        missing = httpx.post(
            f"{navi.url}/e2b/filesystem.Filesystem/Stat", json={"path": "/home/user/no"},
            headers={"Connect-Protocol-Version": "1", "E2b-Sandbox-Id": sbx.sandbox_id,
                     "X-Access-Token": sbx._envd_access_token or ""})
        assert missing.status_code == 404 and missing.json()["code"] == "not_found"
    finally:
        sbx.kill()


def test_the_async_sdk(e2b_env: str) -> None:
    async def scenario() -> None:
        sbx = await AsyncSandbox.create()
        try:
            await sbx.files.write("/home/user/a.txt", "async")
            assert await sbx.files.read("/home/user/a.txt") == "async"
            assert [e.name for e in await sbx.files.list("/home/user")] == ["a.txt"]
            assert await sbx.is_running()
        finally:
            await sbx.kill()
        assert not await sbx.is_running()

    asyncio.run(scenario())
