"""A tenant tool whose name a newer built-in took (`grep`, `tree`) is renamed before the
built-in answers to that name: by `navi tools migrate` (dry run first) and at every start
of the server, with a warning naming them and each rename audited. Real files, a real
store, the real app factory."""

from __future__ import annotations

import json
import os
from pathlib import Path

from structlog.testing import capture_logs
from typer.testing import CliRunner

from runtime.cli import app as cli
from runtime.policy import Subject
from runtime.tools.builtin.search import GrepTool
from runtime.tools.user.migrate import migrate, renamed_source
from runtime.tools.user.store import UserToolStore
from runtime.tools.user.tool import UserTool
from tests.fakes.agent_app import agent_app

TENANT = "t_0123456789abcdef"


def tool_code(name: str) -> str:
    return (f'"""A tenant tool from before `{name}` was built in."""\n\n'
            f'name = "{name}"  # keep this comment\n'
            'description = "count lines"\n'
            'parameters = {"type": "object", "properties": {}}\n\n\n'
            "async def execute(params):\n"
            f'    return "{name} ran"\n')


def old_world(data: Path) -> None:
    """Tools written when `grep` and `tree` were free names (no built-in had them)."""
    before = UserToolStore(data, shipped_dir=None, reserved=frozenset())
    for name in ("grep", "tree", "grep_user", "line_count"):
        before.write(TENANT, name, tool_code(name))
    enabled = data / "tools" / TENANT / "enabled.json"
    enabled.write_text(json.dumps({**json.loads(enabled.read_text()), "tree": False}))


def test_migrate_renames_file_literal_hash_and_enabled_state(tmp_path: Path) -> None:
    old_world(tmp_path)
    store = UserToolStore(tmp_path, shipped_dir=None)
    unmigrated = store.scan(TENANT)
    assert "navi tools migrate" in unmigrated.errors["grep"]
    assert "grep" not in unmigrated.tools

    plan = migrate(store, dry_run=True)
    assert [(r.old, r.new) for r in plan.renamed] == [("grep", "grep_user2"),
                                                      ("tree", "tree_user")]
    assert (tmp_path / "tools" / TENANT / "grep.py").exists()  # a dry run changes nothing

    done = migrate(store)
    assert done.renamed == plan.renamed and done.stuck == []
    folder = tmp_path / "tools" / TENANT
    assert not (folder / "grep.py").exists() and not (folder / "tree.py").exists()
    text = (folder / "grep_user2.py").read_text()
    assert text == tool_code("grep").replace('name = "grep"', 'name = "grep_user2"')
    catalog = store.scan(TENANT)
    assert catalog.errors == {}
    assert sorted(catalog.tools) == ["grep_user", "grep_user2", "line_count", "tree_user"]
    assert catalog.tools["grep_user2"].enabled and not catalog.tools["tree_user"].enabled
    assert catalog.tools["grep_user2"].descriptor.sha256 == done.renamed[0].new_sha256
    assert migrate(store).renamed == []  # nothing left to do


def test_a_file_changed_behind_the_runtime_is_not_renamed(tmp_path: Path) -> None:
    old_world(tmp_path)
    (tmp_path / "tools" / TENANT / "grep.py").write_text(tool_code("grep") + "# edited\n")
    result = migrate(UserToolStore(tmp_path, shipped_dir=None))
    assert [s.name for s in result.stuck] == ["grep"] and "hash" in result.stuck[0].reason
    assert [r.old for r in result.renamed] == ["tree"]


def test_only_the_name_literal_changes() -> None:
    source = b'x = 1\nname = "grep"   # a name\nnote = "grep"\n'
    assert renamed_source(source, "grep", "grep_user") == (
        b'x = 1\nname = "grep_user"   # a name\nnote = "grep"\n')


def test_navi_tools_migrate_shows_then_renames_and_audits(tmp_path: Path) -> None:
    data = tmp_path / "data"
    old_world(data)
    runner = CliRunner()
    dry = runner.invoke(cli, ["tools", "migrate", "--data-dir", str(data), "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert f"would rename {TENANT}: grep -> grep_user2" in dry.output
    assert (data / "tools" / TENANT / "grep.py").exists()
    real = runner.invoke(cli, ["tools", "migrate", "--data-dir", str(data)])
    assert real.exit_code == 0, real.output
    assert f"renamed {TENANT}: tree -> tree_user" in real.output
    assert not (data / "tools" / TENANT / "tree.py").exists()
    again = runner.invoke(cli, ["tools", "migrate", "--data-dir", str(data)])
    assert "no user tool has a built-in tool's name" in again.output


async def test_the_server_renames_at_start_and_says_which(tmp_path: Path) -> None:
    old_world(tmp_path / "data")
    with capture_logs() as logs:
        async with agent_app(tmp_path) as app:
            registry = app.services.tools.registry
            subject = Subject(tenant=TENANT, session="s_0123456789abcdef")
            assert isinstance(await registry.lookup("grep", subject), GrepTool)
            mine = await registry.lookup("grep_user2", subject)
            assert isinstance(mine, UserTool)
            records = await app.services.audit.records(tenant=TENANT)
    warned = [e for e in logs if e["event"] == "user_tools_renamed"]
    assert len(warned) == 1 and warned[0]["log_level"] == "warning"
    assert warned[0]["renamed"] == [f"{TENANT}: grep -> grep_user2",
                                    f"{TENANT}: tree -> tree_user"]
    assert [(r.action, r.object) for r in records if r.rule == "tools.migrate"] == [
        ("tool.write", "grep_user2"), ("tool.delete", "grep"),
        ("tool.write", "tree_user"), ("tool.delete", "tree")]
    assert not os.path.exists(tmp_path / "data" / "tools" / TENANT / "grep.py")
