"""The embedded default model for real: no model server answers, so `navi serve` starts
llama-cpp-python's server with Gemma 3 270M on loopback and the agent answers with it.

Slow: the first install builds llama.cpp (about 5 minutes on two cores). It runs when the
model is already installed in `NAVI_TEST_EMBEDDED_DIR` (default `~/.cache/navi/embedded`),
or when `NAVI_TEST_EMBEDDED=1` asks for the install; otherwise it is skipped.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from runtime.agent.llm.embedded import MODEL_ALIAS, EmbeddedServer
from tests.e2e.conftest import start_server, stop_server
from tests.e2e.test_agent_api import closed_port_url, new_session, send, watch

EMBEDDED_DIR = Path(os.environ.get("NAVI_TEST_EMBEDDED_DIR")
                    or Path.home() / ".cache" / "navi" / "embedded")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.docker,
    pytest.mark.skipif(
        not EmbeddedServer(EMBEDDED_DIR).installed() and os.environ.get("NAVI_TEST_EMBEDDED")
        != "1", reason=f"embedded model not installed in {EMBEDDED_DIR}; NAVI_TEST_EMBEDDED=1 "
        "installs it (first build about 5 minutes)"),
]


def test_embedded_model_answers_when_no_server_does(tmp_path: Path) -> None:
    srv = start_server(tmp_path, extra_env={
        "NAVI_OLLAMA_HOST": closed_port_url(), "NAVI_OPENAI_BASE_URL": "",
        "NAVI_EMBEDDED_MODEL": "auto", "NAVI_EMBEDDED_DIR": str(EMBEDDED_DIR)})
    try:
        _, token = srv.tenant_with_user()
        session = new_session(srv, token)
        send(srv, token, session, "Use code_exec to run the python program print(6*7).")
        first = watch(srv, token, session, timeout=900)
        mark = first[-1]["_id"]
        send(srv, token, session, "Say hello in one short sentence.")
        second = watch(srv, token, session, after=mark, timeout=600)
        with srv.client(token) as client:
            history = client.get(f"/v1/sessions/{session}/messages").json()
        log = srv.log()
    finally:
        stop_server(srv)
    notices = [e["message"] for e in first if e["type"] == "notice"]
    assert len(notices) == 1 and MODEL_ALIAS in notices[0]
    for events in (first, second):
        assert events[-1]["type"] == "stream_end", events[-1]
        assert events[-1]["content"].strip()
    start = next(e for e in second if e["type"] == "stream_start")
    assert start["backend"] == "embedded" and start["model"] == MODEL_ALIAS
    served = {m["meta"].get("served_by") for m in history if m["role"] == "assistant"}
    assert all(s and s.startswith("http://127.0.0.1:") for s in served - {None})
    # whatever tools the small model chose ran through the sandbox like any other
    for call in (e for e in first if e["type"] == "tool_call"):
        assert any(r["type"] == "tool_result" and r["exec_id"] == call["exec_id"]
                   for r in first)
    serving = [json.loads(line) for line in log.splitlines() if "embedded_model_serving" in line]
    assert serving and serving[0]["model"] == MODEL_ALIAS
    assert not Path(f"/proc/{serving[0]['pid']}").exists()  # the server went with navi serve
