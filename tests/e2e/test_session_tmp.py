"""A session's /tmp persists on its disk, and the files API acts as the sandbox uid
(docs/sessions.md): a real `navi serve`, a real engine, runc and gVisor,
cold calls (no warm pool) and warm ones (pre-made containers of the session)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import Server, start_server, stop_server

pytestmark = pytest.mark.docker

POLICY = Path(__file__).parent / "policies" / "session_tmp.yaml"
DISK_MB = 24  # the policy's session_disk_mb


def _serve(factory: pytest.TempPathFactory, warm_pool_size: int) -> Iterator[Server]:
    srv = start_server(factory.mktemp(f"warm{warm_pool_size}"), policy=POLICY, extra_env={
        "NAVI_WARM_POOL_SIZE": str(warm_pool_size), "NAVI_EMBEDDED_MODEL": "off"})
    yield srv
    stop_server(srv)


@pytest.fixture(scope="module")
def cold(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from _serve(tmp_path_factory, 0)


@pytest.fixture(scope="module")
def warm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from _serve(tmp_path_factory, 1)


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    while Session.opened:
        Session.opened.pop().close()


class Session:
    opened: list[httpx.Client] = []

    def __init__(self, server: Server, profile: str = "developer") -> None:
        self.tenant, token = server.tenant_with_user()
        self.http = server.client(token)
        Session.opened.append(self.http)
        resp = self.http.post("/v1/sessions", json={"profile": profile})
        assert resp.status_code == 201, resp.text
        self.id = resp.json()["id"]
        self.dir = server.data_dir / "workspaces" / self.tenant / self.id

    def sh(self, command: str) -> dict[str, Any]:
        resp = self.http.post(f"/v1/sessions/{self.id}/exec",
                              json={"tool": "terminal", "args": {"command": command}})
        assert resp.status_code == 200, resp.text
        return dict(resp.json())

    def files(self, method: str, path: str, **kw: Any) -> httpx.Response:
        return self.http.request(method, f"/v1/sessions/{self.id}/files/{path}", **kw)


def _persists(session: Session) -> None:
    first = session.sh("echo kept > /tmp/a && mkdir -p ~/.cache && echo home > ~/.cache/b "
                       "&& echo $HOME")
    assert first["exit_code"] == 0 and first["stdout"] == "/tmp\n", first
    for _ in range(2):  # the next calls: fresh containers, same files
        again = session.sh("cat /tmp/a ~/.cache/b")
        assert again["stdout"] == "kept\nhome\n", again


@pytest.mark.parametrize("profile", ["developer", "gvisor"])
def test_tmp_survives_between_cold_calls(cold: Server, profile: str) -> None:
    _persists(Session(cold, profile))


@pytest.mark.parametrize("profile", ["developer", "gvisor"])
def test_tmp_survives_between_warm_calls(warm: Server, profile: str) -> None:
    session = Session(warm, profile)
    session.sh("true")  # the pool makes this session's next container meanwhile
    _persists(session)
    warm_calls = [line for line in warm.log().splitlines()
                  if '"exec_finished"' in line and session.id in line and '"warm": true' in line]
    assert warm_calls, "no call of the session ran in a warm container"


def test_a_session_made_before_tmp_gets_it_on_first_use(cold: Server) -> None:
    session = Session(cold)
    shutil.rmtree(session.dir / "tmp")  # as a session of the previous layout
    _persists(session)
    st = os.stat(session.dir / "tmp")
    assert oct(st.st_mode & 0o7777) == "0o770" and st.st_uid != 0


def test_tmp_counts_in_the_session_disk_quota(cold: Server) -> None:
    session = Session(cold)
    full = session.sh(f"dd if=/dev/zero of=/tmp/fill bs=1M count={2 * DISK_MB} 2>&1; "
                      "df -m --output=size /tmp | tail -1")
    assert "No space left on device" in full["stdout"], full
    assert int(full["stdout"].split()[-1]) <= DISK_MB, full
    # the same disk: the workspace has no room left either
    refused = session.files("PUT", "more.bin", content=b"x" * (1024 * 1024))
    assert refused.status_code == 413 and refused.json()["error"]["code"] == "disk_quota"


def test_tmp_is_nosuid_nodev_and_a_setuid_file_there_does_not_elevate(cold: Server) -> None:
    session = Session(cold)
    flags = session.sh("awk '$5 == \"/tmp\" {print $6}' /proc/self/mountinfo")
    assert {"nosuid", "nodev"} <= set(flags["stdout"].strip().split(",")), flags
    # a root-owned setuid copy of `id` in the session's /tmp (as a root call could leave it)
    target = session.dir / "tmp" / "suid-id"
    shutil.copy("/usr/bin/id", target)
    os.chown(target, 0, 0)
    os.chmod(target, 0o4755)
    ran = session.sh("/tmp/suid-id -u; id -u")
    euid, uid = ran["stdout"].split()
    assert euid == uid != "0", ran


def test_the_files_api_reads_and_writes_tmp(cold: Server) -> None:
    session = Session(cold)
    put = session.files("PUT", "%2Ftmp/up/loaded.txt", content=b"from the API")
    assert put.status_code == 201 and put.json()["path"] == "/tmp/up/loaded.txt", put.text
    seen = session.sh("cat /tmp/up/loaded.txt; echo; stat -c %u /tmp/up/loaded.txt; id -u")
    assert seen["stdout"].split("\n")[0] == "from the API", seen
    owner, uid = seen["stdout"].split()[-2:]
    assert owner == uid, seen  # the sandbox uid's file
    session.sh("echo from the sandbox > /tmp/made.txt")
    for path in ("%2Ftmp/made.txt", "/tmp/made.txt"):  # %2F or a double slash
        got = session.files("GET", path)
        assert got.status_code == 200 and got.content == b"from the sandbox\n", path
    listing = session.http.get(f"/v1/sessions/{session.id}/files", params={"path": "/tmp"})
    assert {"/tmp/made.txt", "/tmp/up/loaded.txt"} <= {e["path"] for e in listing.json()}
    # workspace paths mean what they meant: `tmp/x` is the workspace's, `/workspace/x` refused
    assert session.files("GET", "tmp/made.txt").status_code == 404
    assert session.files("GET", "/workspace/x").status_code == 400
    assert session.files("DELETE", "%2Ftmp/made.txt").status_code == 204
    assert session.sh("test -e /tmp/made.txt; echo $?")["stdout"] == "1\n"


def test_mode_bits_set_in_the_sandbox_bind_the_files_api(cold: Server) -> None:
    session = Session(cold)
    session.sh("echo secret > hidden.txt && chmod 000 hidden.txt && echo x > locked.txt && "
               "chmod -w locked.txt && mkdir ro && echo a > ro/a && chmod 555 ro && "
               "echo t > /tmp/hidden && chmod 000 /tmp/hidden")
    for method, path, body in (("GET", "hidden.txt", None), ("PUT", "locked.txt", b"y"),
                               ("PUT", "ro/b.txt", b"b"), ("PUT", "ro/a", b"a2"),
                               ("DELETE", "ro/a", None), ("GET", "%2Ftmp/hidden", None)):
        resp = session.files(method, path, content=body)
        assert resp.status_code == 403, (method, path, resp.text)
        assert resp.json()["error"]["code"] == "permission_denied", resp.text
    after = session.sh("cat locked.txt; ls ro")
    assert after["stdout"] == "x\na\n", after


def test_no_deputy_through_a_symlink_in_tmp(cold: Server) -> None:
    session = Session(cold)
    session.sh("ln -s /etc/shadow /tmp/shadow && ln -s / /tmp/root && "
               "ln -s /workspace /tmp/ws")
    for method, path in (("GET", "%2Ftmp/shadow"), ("GET", "%2Ftmp/root/etc/passwd"),
                         ("PUT", "%2Ftmp/root/tmp/planted"), ("PUT", "%2Ftmp/shadow"),
                         ("GET", "%2Ftmp/ws/x")):
        resp = session.files(method, path, content=b"x" if method == "PUT" else None)
        assert resp.status_code == 400, (method, path, resp.text)
        assert resp.json()["error"]["code"] == "invalid_path", resp.text
    assert not Path("/tmp/planted").exists()


def _as_root(session: Session) -> httpx.Response:
    return session.http.post(f"/v1/sessions/{session.id}/exec", json={
        "tool": "terminal", "args": {"command": "id -u; echo r > /tmp/by-root", "user": "root"}})


def test_root_only_under_gvisor_with_allow_root(cold: Server) -> None:
    for profile in ("developer", "gvisor"):  # no allow_root: refused before anything runs
        refused = _as_root(Session(cold, profile))
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"]["rule"] == f"profiles.{profile}.limits.allow_root"
    session = Session(cold, "gvisor_root")
    ran = _as_root(session)
    assert ran.status_code == 200 and ran.json()["stdout"] == "0\n", ran.text
    assert ran.json()["runtime"] == "gvisor"
    assert session.sh("id -u")["stdout"] != "0\n"  # without asking: the tenant's uid


async def test_the_inspect_provider_runs_root_where_the_policy_allows(cold: Server) -> None:
    from inspect_ai.util import SandboxUserUnsupportedError

    from runtime.bridges.inspect_sandbox import NaviSandboxConfig, NaviSandboxEnvironment

    for profile, expect_root in (("gvisor_root", True), ("developer", False)):
        config = NaviSandboxConfig(url=cold.url, token=cold.tenant_with_user()[1],
                                   profile=profile)
        envs = await NaviSandboxEnvironment.sample_init("root", config, {})
        try:
            env = envs["default"]
            if expect_root:
                assert (await env.exec(["whoami"], user="root")).stdout == "root\n"
            else:
                with pytest.raises(SandboxUserUnsupportedError):
                    await env.exec(["whoami"], user="root")
        finally:
            await NaviSandboxEnvironment.sample_cleanup("root", config, envs, False)
