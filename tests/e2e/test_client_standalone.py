"""The `navi-client` distribution installs alone: `pip install ./clients/python` into a fresh
venv brings httpx and pydantic and nothing of the server (no docker, fastapi, uvicorn, mcp,
OpenTelemetry, no `runtime` package), and the client imported from there calls a real
`navi serve` (sessions, files, an error answer as its exception)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import ROOT, Server, start_server, stop_server

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_server(tmp_path_factory.mktemp("standalone"), ready_s=90)
    yield srv
    stop_server(srv)

PROBE = textwrap.dedent("""
    import importlib.metadata as md, importlib.util, json, os, sys
    absent = {n: importlib.util.find_spec(n) is None for n in (
        "docker", "fastapi", "uvicorn", "starlette", "mcp", "opentelemetry", "aiosqlite",
        "structlog", "yaml", "runtime")}
    import navi_client
    from navi_client import NaviClient, NotFoundError
    with NaviClient(os.environ["NAVI_URL"], os.environ["NAVI_TOKEN"]) as navi:
        session = navi.create_session(title="standalone")
        navi.put_file(session.id, "a.txt", "hello")
        read = navi.get_file(session.id, "a.txt").decode()
        try:
            navi.get_session("ses_nosuchsession")
            error = None
        except NotFoundError as exc:
            error = [exc.status, exc.code]
    print(json.dumps({"absent": absent, "file": navi_client.__file__, "read": read,
                      "error": error, "requires": md.requires("navi-client"),
                      "dists": sorted(d.metadata["Name"].lower() for d in md.distributions())}))
""")


def test_the_client_installs_alone_and_calls_a_server(server: Server, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    started = time.monotonic()
    # no pip of its own (ensurepip is the slow part): this pip installs into it (--python)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    python = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    source = tmp_path / "navi-client"  # a copy: pip builds in the tree it installs from
    shutil.copytree(ROOT / "clients" / "python", source,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    pip = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                          "--disable-pip-version-check", str(source)],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    installed_s = time.monotonic() - started
    _, token = server.tenant_with_user()
    run = subprocess.run([str(python), "-c", PROBE], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120,
                         env={**env, "NAVI_URL": server.url, "NAVI_TOKEN": token})
    assert run.returncode == 0, run.stdout + run.stderr
    seen = json.loads(run.stdout)
    assert all(seen["absent"].values()), seen["absent"]
    assert seen["file"].startswith(str(venv))  # the installed copy, not the checkout
    assert (seen["read"], seen["error"]) == ("hello", [404, "not_found"])
    assert sorted(r.split(">")[0].split("=")[0].strip() for r in seen["requires"]) == [
        "httpx", "pydantic"]
    assert not {"docker", "fastapi", "uvicorn", "mcp", "navi-runtime"} & set(seen["dists"])
    print(f"venv + pip install ./clients/python: {installed_s:.1f} s")  # -s shows it
