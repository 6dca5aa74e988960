"""`navi secrets`: against a real data directory, checked through its audit log and store."""

from __future__ import annotations

import asyncio
from pathlib import Path

from typer.testing import CliRunner

from runtime.audit import AuditLog
from runtime.cli import app

runner = CliRunner()


def _invoke(*args: str, stdin: str | None = None):
    return runner.invoke(app, list(args), input=stdin)


def _actions(data_dir: Path) -> list[tuple[str | None, str | None, str | None, str | None]]:
    async def go():
        async with AuditLog(data_dir) as audit:
            return [(r.action, r.object, r.user, r.rule)
                    for r in await audit.records(kind="action")]

    return asyncio.run(go())


def test_set_list_delete_audited_first(tmp_path: Path) -> None:
    data = ["--data-dir", str(tmp_path)]
    made = _invoke("tokens", "create", "--tenant", "acme", "--role", "user", *data)
    assert made.exit_code == 0, made.output

    put = _invoke("secrets", "set", "api_key", "--tenant", "acme", *data, stdin="s3cret-value\n")
    assert put.exit_code == 0, put.output
    listed = _invoke("secrets", "list", "--tenant", "acme", *data)
    assert listed.exit_code == 0 and listed.stdout.split() == ["api_key"], listed.output
    assert "s3cret-value" not in listed.output
    gone = _invoke("secrets", "delete", "api_key", "--tenant", "acme", *data)
    assert gone.exit_code == 0, gone.output
    assert _invoke("secrets", "list", "--tenant", "acme", *data).stdout.split() == []

    secret_changes = [a for a in _actions(tmp_path) if a[0] and a[0].startswith("secret.")]
    assert secret_changes == [("secret.set", "api_key", "cli", "cli.secrets"),
                              ("secret.delete", "api_key", "cli", "cli.secrets")]


def test_unknown_tenant_or_secret_is_exit_2_and_nothing_audited(tmp_path: Path) -> None:
    data = ["--data-dir", str(tmp_path)]
    assert _invoke("tokens", "create", "--tenant", "acme", "--role", "user", *data).exit_code == 0
    nobody = _invoke("secrets", "list", "--tenant", "nobody", *data)
    assert nobody.exit_code == 2 and "no tenant 'nobody'" in nobody.stderr
    missing = _invoke("secrets", "delete", "nope", "--tenant", "acme", *data)
    assert missing.exit_code == 2 and "no secret named 'nope'" in missing.stderr
    assert not [a for a in _actions(tmp_path) if a[0] and a[0].startswith("secret.")]


def test_a_bad_name_is_a_clear_error_not_a_traceback(tmp_path: Path) -> None:
    data = ["--data-dir", str(tmp_path)]
    for args in (("set", "BAD-NAME"), ("delete", "BAD-NAME")):
        done = _invoke("secrets", *args, "--tenant", "acme", *data, stdin="v\n")
        assert done.exit_code == 2, done.output
        assert "error:" in done.output and "Traceback" not in done.output
