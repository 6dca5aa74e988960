"""`test_tool` refuses a disabled user tool (switched off in its `enabled.json`), as a call by
the tool's own name does: a `forbidden` tool error in the registry, a 403 envelope on the exec
route, and nothing run. Real Executor, audit and tool store; the FakeBackend records runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runtime.errors import Forbidden
from runtime.sandbox.fake import FakeResponse
from tests.fakes.calls import call
from tests.unit.test_api_exec_contract import api, backend, envelope, user_session  # noqa: F401
from tests.unit.test_api_roles import Api
from tests.unit.test_tools_exec import SHOUT, Rig, rig  # noqa: F401 - `rig`: the fixture

ANSWER = FakeResponse(stdout=b'{"ok": true, "result": "HI"}\n')


def switch(tenant_dir: Path, name: str, on: bool) -> None:
    index = tenant_dir / "enabled.json"
    index.write_text(json.dumps({**json.loads(index.read_text()), name: on}))


async def test_test_tool_refuses_a_disabled_tool_and_runs_nothing(rig: Rig) -> None:  # noqa: F811
    reg, ctx = rig.services.registry, rig.ctx()
    await call(reg, "write_tool", {"name": "shout", "code": SHOUT}, ctx)
    rig.backend.push(ANSWER)
    assert (await call(reg, "test_tool", {"name": "shout", "params": {"text": "hi"}},
                             ctx)).success  # enabled: it runs
    switch(rig.services.user_tools.store.tenant_dir("t1"), "shout", False)
    with pytest.raises(Forbidden, match="'shout' is disabled"):
        await call(reg, "test_tool", {"name": "shout", "params": {"text": "hi"}}, ctx)
    assert len(rig.backend.requests) == 1  # the disabled tool never reached a sandbox


async def test_the_exec_route_answers_403_for_a_disabled_tool(api: Api) -> None:  # noqa: F811
    async with user_session(api) as (client, session):
        url = f"/v1/sessions/{session}/exec"
        wrote = await client.post(url, json={"tool": "write_tool",
                                             "args": {"name": "shout", "code": SHOUT}})
        assert wrote.status_code == 200 and wrote.json()["ok"], wrote.text
        [written] = (api.services.settings.data_dir / "tools").glob("*/shout.py")
        switch(written.parent, "shout", False)
        backend(api).push(ANSWER)
        resp = await client.post(url, json={"tool": "test_tool",
                                            "args": {"name": "shout", "params": {"text": "a"}}})
    error = envelope(resp, 403)
    assert error["code"] == "forbidden" and "disabled" in error["message"]
    assert backend(api).requests == []
