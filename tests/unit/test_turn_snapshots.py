"""Which agent calls count as file changes (the turn snapshots before the first of them)."""

from __future__ import annotations

import pytest

from runtime.agent.turn_snapshots import changes_files


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
