"""A server restart keeps an E2B sandbox's commands and code contexts: after it,
`Sandbox.connect` lists the command still running under the pid `Start` gave it, kills it
by that pid, and lists the context made before (the real `e2b-code-interpreter` 2.11)."""

from __future__ import annotations

from pathlib import Path

import pytest
from e2b_code_interpreter import Sandbox as CodeSandbox

from tests.e2e.conftest import stop_server
from tests.e2e.e2b_server import e2b_vars, start_e2b_server

pytestmark = pytest.mark.docker

KEEP = {"NAVI_PROCESS_KEEP_ON_SHUTDOWN": "1", "NAVI_WARM_POOL_SIZE": "0"}


def test_pids_and_contexts_outlive_a_server_restart(tmp_path: Path) -> None:
    first = start_e2b_server(tmp_path, **KEEP)
    try:
        _, key = first.tenant_with_user()
        with e2b_vars(first, key):
            sbx = CodeSandbox.create(timeout=600)
            handle = sbx.commands.run("sleep 600", background=True)
            handle.disconnect()
            ctx = sbx.create_code_context()
            assert handle.pid in [p.pid for p in sbx.commands.list()]
    finally:
        stop_server(first)
    second = start_e2b_server(tmp_path, **KEEP)
    try:
        with e2b_vars(second, key):
            again = CodeSandbox.connect(sbx.sandbox_id)
            listed = {p.pid: p for p in again.commands.list()}
            assert handle.pid in listed, listed
            assert listed[handle.pid].cmd == "/bin/bash"  # the config as the SDK sent it
            assert ctx.id in [c.id for c in again.list_code_contexts()]
            assert again.commands.kill(handle.pid)
            assert handle.pid not in [p.pid for p in again.commands.list()]
            again.kill()
    finally:
        stop_server(second)
