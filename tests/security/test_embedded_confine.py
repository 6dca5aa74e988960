"""The embedded model's build and server never run as the supervisor.

Without building llama.cpp (five minutes): the real launching code runs a tiny stand-in that
reports who it is (uid, gid, groups, session, rlimits, umask), what it sees of the
environment, and whether it can read the data dir's `admin-token` and `keys/secrets.key`
(made by the code that makes them for `navi serve`). `EmbeddedServer._run` runs every build
step (venv, pip, assemble); `EmbeddedServer.ensure` starts the server, here a stand-in
`venv/bin/python` that also answers `GET /v1/models` so that `ensure` sees it ready. Both
run on uvloop, the event loop `navi serve` runs on (its subprocesses take fewer options).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Coroutine, Iterator
from pathlib import Path

import pytest
import uvloop

from runtime.agent.llm.embedded import PACKAGES, EmbeddedServer
from runtime.agent.llm.embedded_confine import base_python, launch, model_user, prepare
from runtime.api.bootstrap import TOKEN_FILE, _read_or_create
from runtime.errors import LLMUnavailable
from runtime.store.secrets import SecretBox

SECRET = "navi-admin-secret-for-the-confinement-test"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to switch uid")

REPORT = """
import json, os, resource, sys
def tried(path):
    try:
        open(path, "rb").read()
        return "read"
    except OSError as exc:
        return type(exc).__name__
data = DATA
old = os.umask(0); os.umask(old)
print(json.dumps({
    "uid": os.getuid(), "euid": os.geteuid(), "gid": os.getgid(), "groups": os.getgroups(),
    "own_session": os.getsid(0) == os.getpid(), "env": dict(os.environ), "umask": old,
    "nofile": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
    "core": resource.getrlimit(resource.RLIMIT_CORE)[0],
    "nproc": resource.getrlimit(resource.RLIMIT_NPROC)[0],
    "admin_token": tried(data + "/admin-token"),
    "secrets_key": tried(data + "/keys/secrets.key"),
    "argv": sys.argv[1:]}), flush=True)
"""

SERVE = """
import http.server, sys
port = int(sys.argv[sys.argv.index("--port") + 1])
class Models(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b'{"data": []}')
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", port), Models).serve_forever()
"""


@pytest.fixture
def data_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A data dir as `navi serve` makes it, under a directory anyone may traverse (pytest's
    own tmp dirs are 0700, which the model's uid could not get through)."""
    monkeypatch.setenv("NAVI_ADMIN_TOKEN", SECRET)
    monkeypatch.setenv("NAVI_OPENAI_API_KEY", SECRET)
    base = Path(tempfile.mkdtemp(prefix="navi-embedded-"))
    os.chmod(base, 0o755)
    data = base / "data"
    data.mkdir()
    _read_or_create(data / TOKEN_FILE)
    SecretBox.in_data_dir(data).fernet()
    try:
        yield data
    finally:
        shutil.rmtree(base, ignore_errors=True)


def on_uvloop(coro: Coroutine[object, object, object]) -> None:
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(coro)


def _assert_confined(report: dict, server: EmbeddedServer) -> None:
    user = server.user()
    assert user.confined and user.uid not in (0, os.getuid())
    assert (report["uid"], report["euid"], report["gid"]) == (user.uid, user.uid, user.gid)
    assert report["groups"] == [] and report["own_session"]
    assert report["admin_token"] == "PermissionError", report
    assert report["secrets_key"] == "PermissionError", report
    assert SECRET not in json.dumps(report["env"])
    assert not any(k.startswith("NAVI_") for k in report["env"])
    assert report["env"]["HOME"] == str(server.model_dir / "home")
    assert (report["nofile"], report["core"], report["nproc"]) == (4096, 0, 512)
    assert report["umask"] == 0o077


def test_build_steps_run_as_the_models_own_uid(data_dir: Path) -> None:
    on_uvloop(_build_steps(data_dir))


async def _build_steps(data_dir: Path) -> None:
    server = EmbeddedServer(data_dir / "embedded")
    prepare(server.directory, server.user(), fresh=True)
    lines: list[str] = []

    async def on_line(line: str) -> None:
        lines.append(line)

    code = REPORT.replace("DATA", repr(str(data_dir)))
    await server._run([base_python(server.user()), "-c", code],  # noqa: SLF001
                      server.directory / "install.log", 30, on_line)
    _assert_confined(json.loads(lines[0]), server)


def test_server_runs_as_the_models_own_uid(data_dir: Path) -> None:
    on_uvloop(_server_runs(data_dir))


async def _server_runs(data_dir: Path) -> None:
    digest = hashlib.sha256(b"GGUF stand-in").hexdigest()
    server = EmbeddedServer(data_dir / "embedded", model_sha256=digest)
    user = server.user()
    model = prepare(server.directory, user, fresh=True)
    standin = model / "standin.py"
    standin.write_text(REPORT.replace("DATA", repr(str(data_dir))) + SERVE)
    server.python.parent.mkdir(parents=True)
    server.python.write_text(f"#!/bin/sh\nexec {base_python(user)} {standin} \"$@\"\n")
    os.chmod(server.python, 0o755)
    server.model_path.write_bytes(b"GGUF stand-in")
    server.stamp.write_text(json.dumps({"packages": list(PACKAGES), "sha256": digest}))
    try:
        url = await server.ensure()
        assert url.startswith("http://127.0.0.1:")
        log = server.directory / "server.log"
        for _ in range(100):
            if log.read_text().strip():
                break
            await asyncio.sleep(0.05)
        report = json.loads(log.read_text().splitlines()[0])
        assert report["argv"][:2] == ["-m", "llama_cpp.server"]
        _assert_confined(report, server)
        proc = server._process  # noqa: SLF001
        assert proc is not None
        status = Path(f"/proc/{proc.pid}/status").read_text()
        assert f"Uid:\t{user.uid}\t{user.uid}" in status
    finally:
        await server.close()
    # a model file that is not the pinned one does not start
    server.model_path.write_bytes(b"GGUF tampered")
    with pytest.raises(LLMUnavailable, match="SHA-256"):
        await server.ensure()
    server.model_path.unlink()  # nor does a FIFO in its place hang the supervisor
    os.mkfifo(server.model_path)
    with pytest.raises(LLMUnavailable, match="not a regular file"):
        await asyncio.wait_for(server.ensure(), 10)


def test_a_directory_out_of_the_models_reach_is_refused_clearly(data_dir: Path) -> None:
    closed = data_dir.parent / "closed"
    closed.mkdir(mode=0o700)
    server = EmbeddedServer(closed / "embedded")
    with pytest.raises(LLMUnavailable, match=f"{closed} is mode 0700"):
        prepare(server.directory, server.user(), fresh=True)
    assert not server.directory.exists() or not server.model_dir.exists()


def test_the_models_uid_is_never_a_host_accounts(tmp_path: Path) -> None:
    assert model_user(None, 200000, None).uid == 199999  # below every tenant's
    with pytest.raises(LLMUnavailable, match="host account"):
        model_user(65534, 200000, None)  # nobody: in this system's passwd
    passwd = tmp_path / "passwd"
    passwd.write_text("root:x:0:0:root:/root:/bin/sh\nlab:x:199999:199999::/home/lab:/bin/sh\n")
    with pytest.raises(LLMUnavailable, match="host account"):
        model_user(None, 200000, passwd)


def test_a_supervisor_that_is_not_root_runs_it_as_itself_and_says_so() -> None:
    """It cannot switch uid: the model runs as the supervisor's own user, no `user=`."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: drop to nobody, report, never return into pytest
        code = 1
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            user = model_user(None, 200000, None)
            argv, options = launch(user, ["true"])
            os.write(write, json.dumps({"uid": user.uid, "confined": user.confined,
                                        "note": user.note, "argv": argv,
                                        "options": sorted(options)}).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as fh:
        seen = json.loads(fh.read())
    os.waitpid(pid, 0)
    assert (seen["uid"], seen["confined"]) == (65534, False)
    assert "not root" in seen["note"]
    assert seen["options"] == ["start_new_session"]
    assert not any("setpriv" in a for a in seen["argv"])  # no user/group switch
    assert not any(a.startswith("--nproc") for a in seen["argv"])  # shared with ours


def test_a_cancelled_build_step_leaves_nothing_running(data_dir: Path) -> None:
    """ninja runs each compiler in a process group of its own: a step that times out ends
    with everything of its session, not only its first process."""
    on_uvloop(_cancelled_step(data_dir))


async def _cancelled_step(data_dir: Path) -> None:
    server = EmbeddedServer(data_dir / "embedded")
    prepare(server.directory, server.user(), fresh=True)
    lines: list[str] = []

    async def on_line(line: str) -> None:
        lines.append(line)

    code = ("import subprocess, time\n"
            "p = subprocess.Popen(['sleep', '300'], process_group=0,\n"
            "                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
            "print(p.pid, flush=True)\n"
            "time.sleep(300)\n")
    with pytest.raises(TimeoutError):
        await server._run([base_python(server.user()), "-c", code],  # noqa: SLF001
                          server.directory / "install.log", 3, on_line)
    grandchild = Path(f"/proc/{int(lines[0])}/stat")
    for _ in range(50):
        if not grandchild.exists() or grandchild.read_text().split(") ")[1][0] == "Z":
            break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError("a process the step started (own group) outlived it")


def test_the_default_install_dir_is_one_the_model_uid_can_reach() -> None:
    """`make run` keeps its data dir in the checkout, often under root's 0700 home: the
    model's default dir then moves to the system's cache instead of being refused."""
    from runtime.agent.llm.embedded_confine import SYSTEM_CACHE, default_directory

    root = Path(tempfile.mkdtemp(prefix="navi-embedded-dir-", dir="/tmp"))
    try:
        root.chmod(0o755)
        open_data = root / "open" / "data"
        open_data.mkdir(parents=True, mode=0o755)
        (root / "open").chmod(0o755)
        closed_data = root / "closed" / "data"
        closed_data.mkdir(parents=True)
        (root / "closed").chmod(0o700)
        assert default_directory(open_data, None, 200000) == open_data / "embedded"
        assert default_directory(closed_data, None, 200000) == SYSTEM_CACHE
    finally:
        shutil.rmtree(root)
