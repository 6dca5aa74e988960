"""docs/agent.md lists every built-in tool under its group (the table users read to write a
policy's allow/deny lists): a new tool without a row there fails here."""

from __future__ import annotations

import re

from runtime.config import PROJECT_ROOT
from runtime.policy.model import GROUPS


def test_every_builtin_tool_is_in_the_agent_page_under_its_group() -> None:
    text = (PROJECT_ROOT / "docs" / "agent.md").read_text()
    rows = dict(re.findall(r"^\| `(group:[a-z_]+)` \| (.*) \|$", text, re.M))
    for group, tools in GROUPS.items():
        assert group in rows, f"docs/agent.md has no row for {group}"
        listed = set(re.findall(r"`([a-z0-9_]+)`", rows[group]))
        assert tools <= listed, f"{group}: add {sorted(tools - listed)} to docs/agent.md"
