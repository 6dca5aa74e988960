"""The kernel runner's own stdio (runtime/kernels/runner.py): the shell runs in the runner's
process, and the container's stdin/stdout carry only the runner's JSON lines.

Whatever the code writes, from Python, a child process or straight to fd 1/2, is the
execute's output (never a protocol line: a forged ``done`` is just text), and the code's
stdin is nothing (``input()`` raises as in a Jupyter kernel without stdin; fd 0 reads end
of file instead of the supervisor's next job).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import start_server, stop_server

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    srv = start_server(tmp_path_factory.mktemp("kernel-runner"), ready_s=180)
    try:
        _, token = srv.tenant_with_user()
        with srv.client(token) as client:
            yield client
    finally:
        stop_server(srv)


def execute(client: httpx.Client, session: str, code: str, **body: Any) -> dict[str, Any]:
    resp = client.post(f"/v1/sessions/{session}/kernels/default/execute",
                       json={"code": code, **body}, timeout=120)
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


def new_session(client: httpx.Client) -> str:
    resp = client.post("/v1/sessions", json={})
    resp.raise_for_status()
    return str(resp.json()["id"])


FORGED = '{"ev": "done", "id": "forged", "status": "ok", "error": null}'


def test_what_the_code_writes_anywhere_is_its_output(client: httpx.Client) -> None:
    session = new_session(client)
    out = execute(client, session, (
        "import os, subprocess, sys\n"
        "kept = 1\n"
        "print('from python')\n"
        "os.system('echo from a child')\n"
        "subprocess.run(['sh', '-c', 'echo child error >&2'])\n"
        f"os.write(1, b'{FORGED}\\n')\n"
        "sys.__stdout__.write('from the original stream\\n')\n"
        "print('python error', file=sys.stderr)\n"
        "6 * 7"))
    assert out["ok"] and out["error"] is None, out
    for line in ("from python\n", "from a child\n", FORGED + "\n",
                 "from the original stream\n"):
        assert line in out["stdout"], out
    assert "child error\n" in out["stderr"] and "python error\n" in out["stderr"], out
    assert out["results"] == [{"text/plain": "42"}], out
    after = execute(client, session, "kept + 1")  # the protocol is intact
    assert after["results"] == [{"text/plain": "2"}] and after["stdout"] == "", after


def test_the_code_has_no_stdin(client: httpx.Client) -> None:
    session = new_session(client)
    asked = execute(client, session, "input('name? ')")
    assert asked["error"]["name"] == "StdinNotImplementedError", asked
    read = execute(client, session, "import os, sys\n(sys.stdin.read(), os.read(0, 100))",
                   timeout_s=10)
    assert read["results"] == [{"text/plain": "('', b'')"}], read
    assert not read["timed_out"]


def test_notebook_idioms_run(client: httpx.Client) -> None:
    """`%matplotlib inline` and a top-level `await`, as in a Jupyter cell."""
    session = new_session(client)
    out = execute(client, session, "%matplotlib inline\nimport asyncio\n"
                                   "await asyncio.sleep(0.01)\n'awaited'")
    assert out["error"] is None and out["results"] == [{"text/plain": "'awaited'"}], out


def test_child_processes_prints_are_output_once(client: httpx.Client) -> None:
    """A fork of the kernel (os.fork, multiprocessing): the child's prints are the execute's
    output even when it ends without flushing, and what the kernel printed before the fork
    is not printed again by the child."""
    session = new_session(client)
    forked = execute(client, session, (
        "import os\n"
        "print('before the fork')\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    print('in the child')\n"
        "    os._exit(0)\n"
        "os.waitpid(pid, 0)[1]"))
    assert forked["results"] == [{"text/plain": "0"}], forked
    assert forked["stdout"].count("before the fork") == 1, forked
    assert "in the child\n" in forked["stdout"], forked
    pooled = execute(client, session, (
        "from multiprocessing import Pool\n"
        "def square(i):\n"
        "    print('worker', i)\n"
        "    return i * i\n"
        "with Pool(2) as pool:\n"
        "    squares = pool.map(square, range(4))\n"
        "squares"))
    assert pooled["results"] == [{"text/plain": "[0, 1, 4, 9]"}], pooled
    assert all(f"worker {i}\n" in pooled["stdout"] for i in range(4)), pooled
