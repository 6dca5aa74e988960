"""The README documents what the code does: every setting, every sub-command, every route."""

from __future__ import annotations

import re
from pathlib import Path

from runtime.config import Settings

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def test_every_setting_is_in_the_readme() -> None:
    missing = [f"NAVI_{name.upper()}" for name in Settings.model_fields
               if f"`NAVI_{name.upper()}`" not in README]
    assert missing == [], f"document these in README.md (Configuration): {missing}"


def test_readme_names_no_setting_that_does_not_exist() -> None:
    compose_only = {"NAVI_DATA_ROOT", "NAVI_BIND", "NAVI_SUPERVISOR_BASE", "NAVI_HOST_PASSWD_FILE"}
    client_side = {"NAVI_URL", "NAVI_TOKEN"}  # read by `navi mcp stdio` and the inspect provider
    known = {f"NAVI_{name.upper()}" for name in Settings.model_fields} | compose_only \
        | client_side
    named = set(re.findall(r"`(NAVI_[A-Z_]+)`", README))
    assert named - known == set()


def test_readme_starts_with_the_two_commands() -> None:
    head = README[: README.index("## Setting up")]
    assert "make run" in head and "make test" in head
