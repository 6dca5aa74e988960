"""Found by trying the command line and policy files as an attacker or a careless user would
(the `navi` sub-commands); each test failed before its fix: a hang, a traceback, or a
misleading success."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from runtime.audit import AuditEntry, AuditLog
from runtime.cli import app
from runtime.policy import PolicyFileError, load_policy
from runtime.policy.loader import parse_policy

runner = CliRunner()

BILLION_LAUGHS = "\n".join(
    [f'a0: &a0 [{", ".join(["lol"] * 9)}]']
    + [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
) + "\n"


def test_policy_with_expanding_aliases_is_refused_quickly() -> None:
    started = time.monotonic()
    with pytest.raises(PolicyFileError, match="aliases"):
        parse_policy(BILLION_LAUGHS, "laughs.yaml")
    assert time.monotonic() - started < 5


def test_policy_nested_beyond_the_parser_is_an_error_not_a_recursion_traceback() -> None:
    with pytest.raises(PolicyFileError, match="nested too deeply"):
        parse_policy("[" * 100_000 + "]" * 100_000, "deep.yaml")


def test_policy_read_is_bounded() -> None:
    started = time.monotonic()
    with pytest.raises(PolicyFileError, match="too large"):
        load_policy(Path("/dev/zero"))
    assert time.monotonic() - started < 5


def test_policy_check_cli_exits_2_on_hostile_yaml(tmp_path: Path) -> None:
    path = tmp_path / "laughs.yaml"
    path.write_text(BILLION_LAUGHS)
    result = runner.invoke(app, ["policy", "check", str(path)])
    assert result.exit_code == 2 and "Traceback" not in result.output


def test_audit_verify_of_a_directory_without_a_log_is_not_ok(tmp_path: Path) -> None:
    """A mistyped --data-dir used to print `ok: 0 records verified` and exit 0."""
    for argv in (["audit", "verify"], ["audit", "export"]):
        result = runner.invoke(app, [*argv, "--data-dir", str(tmp_path / "nope")])
        assert result.exit_code == 2, result.output
        assert "no audit log" in result.output


async def test_audit_export_since_beyond_64_bits_is_a_usage_error(tmp_path: Path) -> None:
    async with AuditLog(tmp_path) as log:
        await log.append(AuditEntry(kind="denied", tenant="t", tool="x", rule="default.deny"))
    ok = runner.invoke(app, ["audit", "verify", "--data-dir", str(tmp_path)])
    assert ok.exit_code == 0, ok.output
    for since in ("9" * 30, "²"):
        result = runner.invoke(app, ["audit", "export", "--data-dir", str(tmp_path),
                                     "--since", since])
        assert result.exit_code == 2, result.output
        assert not isinstance(result.exception, OverflowError | ValueError)


@pytest.mark.parametrize("value", ["-5", "0", "nan", "inf"])
def test_exec_and_explain_refuse_a_nonsense_timeout(value: str, tmp_path: Path) -> None:
    """`navi exec --timeout -5` used to run with the default 30 s as if nothing was wrong."""
    result = runner.invoke(app, ["exec", "--tool", "terminal", "--arg", "command=true",
                                 "--timeout", value, "--data-dir", str(tmp_path)])
    assert result.exit_code == 2 and "--timeout" in result.output
    result = runner.invoke(app, ["policy", "explain", "--tool", "terminal",
                                 "--timeout", value])
    assert result.exit_code == 2 and "--timeout" in result.output


def test_serve_refuses_a_short_admin_token_before_starting(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    """It used to start, then fail in uvicorn's lifespan with a traceback."""
    monkeypatch.setenv("NAVI_ADMIN_TOKEN", "short")
    result = runner.invoke(app, ["serve", "--data-dir", str(tmp_path / "data"),
                                 "--port", "1"])
    assert result.exit_code == 2
    assert "NAVI_ADMIN_TOKEN" in result.output
    assert not (tmp_path / "data").exists()


def test_serve_help_shows_the_defaults() -> None:
    result = runner.invoke(app, ["serve", "--help"], env={"COLUMNS": "200"})
    assert "127.0.0.1" in result.output and "8000" in result.output
