"""Which agent calls count as file changes (the turn snapshots before the first of them),
and a turn whose snapshot fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.agent.turn_snapshots import changes_files
from runtime.workspace.disk import loop_mounts_available
from tests.fakes.agent_harness import POLICY, AgentHarness
from tests.fakes.ollama import FakeOllama
from tests.fakes.script import Call, Reply


@pytest.mark.parametrize(("tool", "group", "args", "changes"), [
    ("code_exec", "group:exec", {"language": "python", "code": "print(1)"}, True),
    ("terminal", "group:exec", {"command": "ls"}, True),
    ("edit_file", "group:fs", {"path": "a", "old": "x", "new": "y"}, True),
    ("filesystem", "group:fs", {"action": "write", "path": "a", "content": ""}, True),
    ("filesystem", "group:fs", {"action": "delete", "path": "a"}, True),
    ("filesystem", "group:fs", {"action": "move", "path": "a", "destination": "b"}, True),
    ("filesystem", "group:fs", {"action": "read", "path": "a"}, False),
    ("filesystem", "group:fs", {"action": "list"}, False),
    ("filesystem", "group:fs", None, False),  # arguments that did not parse: it will fail
    ("read_document", "group:fs", {"path": "a.pdf"}, False),
    ("share_file", "group:fs", {"path": "a"}, False),
    ("model_3d", "group:cad", {}, True),
    ("my_tool", "group:user_tools", {}, True),
    ("srv__tool", "group:mcp", {}, True),
    ("spawn_agent", "group:meta", {"task": "x"}, True),
    ("web_search", "group:web", {"query": "x"}, False),
    ("ssh_exec", "group:remote", {"host": "h", "command": "rm -rf /"}, False),
    ("memory", "group:memory", {"action": "save"}, False),
    ("todo", "group:memory", {}, False),
    ("image_view", "group:meta", {"path": "a.png"}, False),
])
def test_changes_files(tool: str, group: str, args: object, changes: bool) -> None:
    assert changes_files(tool, group, args) is changes


@pytest.mark.skipif(not loop_mounts_available(), reason="needs root and loop devices")
async def test_a_failed_snapshot_is_a_notice_and_the_turn_goes_on(tmp_path: Path) -> None:
    """The tenant's disk quota has no room for the checkpoint: the turn writes anyway and
    says it has none (in-process agent on the real services and session disks)."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY.read_text().replace(
        "quotas: {max_concurrent: 4, execs_per_minute: 1000}",
        "quotas: {max_concurrent: 4, execs_per_minute: 1000, tenant_disk_mb: 16}"))
    with FakeOllama([Reply(calls=[Call("filesystem", {"action": "write", "path": "a.txt",
                                                      "content": "new"})]),
                     Reply(content="done")]) as ollama:
        async with AgentHarness(tmp_path, ollama=ollama.url, policy=policy) as h:
            events = await h.turn("write it")
            listed = await h.services.snapshots.list(h.subject)
            audit = await h.audit()
    notices = [e.data["message"] for e in events if e.type == "notice"]
    assert any("No checkpoint" in n and "disk_quota" in n for n in notices), notices
    (result,) = [e.data for e in events if e.type == "tool_result"]
    assert result["success"] is True
    assert events[-1].type == "stream_end" and listed == []
    assert "snapshot.create" in [r["action"] for r in audit]  # asked for, audited, refused
