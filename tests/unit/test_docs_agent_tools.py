"""docs/agent.md and README's agent section list every built-in tool under its group (the
table users read to write a policy's allow/deny lists): a new tool without a row there fails
here."""

from __future__ import annotations

import re

import pytest

from runtime.config import PROJECT_ROOT
from runtime.policy.model import GROUPS


@pytest.mark.parametrize("page", ["docs/agent.md", "README.md"])
def test_every_builtin_tool_is_in_the_agent_page_under_its_group(page: str) -> None:
    text = (PROJECT_ROOT / page).read_text()
    rows = dict(re.findall(r"^\| `(group:[a-z_]+)` \| (.*) \|$", text, re.M))
    for group, tools in GROUPS.items():
        assert group in rows, f"{page} has no row for {group}"
        listed = set(re.findall(r"`([a-z0-9_]+)`", rows[group]))
        assert tools <= listed, f"{group}: add {sorted(tools - listed)} to {page}"
