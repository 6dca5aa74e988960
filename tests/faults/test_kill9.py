"""`kill -9` of the supervisor while a streamed exec, an agent turn and an upload are under
way; then a restart on the same data dir.

Proves: within 30 s no mount the dead supervisor made remains (its guard releases them) and
after the restart no container of its instance remains; the audit chain verifies; the
interrupted exec and the turn's exec are closed `interrupted` in the audit log, visible over
the API; the turn has a stored ending (`assistant` row, `meta.stop_reason: interrupted`); the
half-sent upload left no file (not even its temporary file on the session's disk); and every
session works again (an exec, a new turn).
"""

from __future__ import annotations

import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from runtime.workspace.mount_table import mounts_under
from tests.e2e.conftest import Server, start_server, stop_server
from tests.fakes.agent_harness import POLICY, PROFILES
from tests.fakes.ollama import FakeOllama
from tests.fakes.script import Call, Reply
from tests.faults.helpers import (
    audit_of,
    containers_of,
    instance_id,
    new_session,
    run,
    verify,
    wait_until,
)

pytestmark = pytest.mark.docker


def env_for(ollama: FakeOllama) -> dict[str, str]:
    return {"NAVI_OLLAMA_HOST": ollama.url, "NAVI_PROFILES_DIR": str(PROFILES),
            "NAVI_MODEL": "gemma3:270m", "NAVI_OPENAI_BASE_URL": "",
            "NAVI_EMBEDDED_MODEL": "off"}


def stream_exec(server: Server, token: str, session: str, seen: threading.Event) -> None:
    """A streamed exec that prints, then sleeps until the server dies."""
    body = {"tool": "code_exec", "args": {
        "language": "python", "code": "import time\nprint('started', flush=True)\ntime.sleep(120)"}}
    try:
        with server.client(token) as client, client.stream(
                "POST", f"/v1/sessions/{session}/exec", params={"stream": "true"}, json=body,
                timeout=httpx.Timeout(150)) as resp:
            text = ""
            for chunk in resp.iter_text():
                text += chunk
                if "started\\n" in text or "started\n" in text:
                    seen.set()
    except httpx.HTTPError:
        pass  # the server was killed under it


def half_upload(server: Server, token: str, session: str) -> socket.socket:
    """PUT of a 64 MiB file of which only 2 MiB are ever sent."""
    port = int(server.url.rsplit(":", 1)[1])
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall((f"PUT /v1/sessions/{session}/files/big.bin HTTP/1.1\r\n"
                  f"Host: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
                  "Content-Type: application/octet-stream\r\n"
                  f"Content-Length: {64 * 1024 * 1024}\r\n\r\n").encode())
    sock.sendall(b"x" * (2 * 1024 * 1024))
    return sock


def intents(server: Server, tenant: str, session: str) -> list[dict[str, Any]]:
    return [r for r in audit_of(server, tenant=tenant, session=session)
            if r["kind"] == "intent"]


def test_kill9_during_stream_turn_and_upload(tmp_path: Path) -> None:
    with FakeOllama() as ollama:
        server = start_server(tmp_path, policy=POLICY, extra_env=env_for(ollama))
        data = server.data_dir
        sock = None
        try:
            tenant, token = server.tenant_with_user()
            with server.client(token) as client:
                s_exec, s_turn, s_upload = (new_session(client) for _ in range(3))
                assert run(client, s_upload, "print(1)").status_code == 200  # disk mounted
            instance = instance_id(data)

            seen = threading.Event()
            streamer = threading.Thread(target=stream_exec, args=(server, token, s_exec, seen),
                                        daemon=True)
            streamer.start()
            ollama.model.add(Reply(calls=[Call("code_exec", {
                "language": "python",
                "code": "import time\nprint('started', flush=True)\ntime.sleep(120)"})]))
            with server.client(token) as client:
                resp = client.post(f"/v1/sessions/{s_turn}/messages",
                                   json={"content": "sleep a long time"})
                assert resp.status_code == 202, resp.text
                turn_id = resp.json()["turn_id"]
            sock = half_upload(server, token, s_upload)
            assert seen.wait(60), "the streamed exec never printed"
            assert wait_until(lambda: intents(server, tenant, s_turn), 60)
            time.sleep(1.0)  # the turn's container is running, the upload is half-written
            assert len(containers_of(instance)) >= 2

            server.process.send_signal(signal.SIGKILL)
            server.process.wait(timeout=10)
        finally:
            if sock is not None:
                sock.close()
            stop_server(server)
        # The guard releases every mount of the dead supervisor by itself.
        assert wait_until(lambda: mounts_under(data) == [], 30), mounts_under(data)

        (tmp_path / "again").mkdir()
        again = start_server(tmp_path / "again", policy=POLICY, extra_env={
            **env_for(ollama), "NAVI_DATA_DIR": str(data),
            "NAVI_ADMIN_TOKEN": server.admin_token})
        again.data_dir, again.admin_token = data, server.admin_token
        try:
            assert wait_until(lambda: containers_of(instance) == [], 30)
            assert verify(again)["ok"] is True
            for session in (s_exec, s_turn):
                records = audit_of(again, tenant=tenant, session=session)
                started = [r["exec_id"] for r in records if r["kind"] == "intent"]
                assert len(started) == 1, records
                closing = [r for r in records if r.get("exec_id") == started[0]
                           and r["kind"] in ("outcome", "interrupted")]
                assert [r["kind"] for r in closing] == ["interrupted"], closing

            with again.client(token) as client:
                rows = client.get(f"/v1/sessions/{s_turn}/messages").json()
                last = rows[-1]
                assert last["turn_id"] == turn_id and last["role"] == "assistant"
                assert last["meta"]["stop_reason"] == "interrupted", last

                listing = client.get(f"/v1/sessions/{s_upload}/files").json()
                assert [f["path"] for f in listing] == [], listing
                hidden = run(client, s_upload, "import os; print(sorted(os.listdir('.')))")
                assert hidden.json()["stdout"] == "[]\n", hidden.text

                # every session works again
                assert run(client, s_exec, "print(6 * 7)").json()["stdout"] == "42\n"
                ollama.model.add(Reply(content="all good"))
                resp = client.post(f"/v1/sessions/{s_turn}/messages", json={"content": "hi"})
                assert resp.status_code == 202, resp.text

                def answered() -> bool:
                    rows = client.get(f"/v1/sessions/{s_turn}/messages").json()
                    return bool(rows[-1]["meta"].get("stop_reason") == "stop")
                assert wait_until(answered, 30)
                assert client.put(f"/v1/sessions/{s_upload}/files/big.bin",
                                  content=b"y" * 1024).status_code in (200, 201)
            assert verify(again)["ok"] is True
        finally:
            stop_server(again)
        assert mounts_under(data) == [], again.ending()
