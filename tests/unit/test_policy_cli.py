"""`navi policy check` and `navi policy explain` through the real CLI app."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from runtime.cli import app

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def test_check_ok_for_each_shipped_policy() -> None:
    for name in ("default.yaml", "strict.yaml", "lab.yaml"):
        result = runner.invoke(app, ["policy", "check", str(ROOT / "policies" / name)])
        assert result.exit_code == 0, result.output
        assert "ok" in result.output


def test_check_reports_the_location_and_fails(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nprofiles:\n  dev:\n    allow: [code_exec]\n    denny: [x]\n")
    result = runner.invoke(app, ["policy", "check", str(bad)])
    assert result.exit_code == 2
    assert f"{bad}:5:5: profiles.dev.denny: Extra inputs are not permitted" in result.output
    assert "Traceback" not in result.output


def test_check_lists_every_problem_on_its_own_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nprofiles:\n  dev:\n    alow: [x]\n    deny: [group:nope]\n")
    result = runner.invoke(app, ["policy", "check", str(bad)])
    lines = result.output.splitlines()
    assert result.exit_code == 2 and len(lines) == 2
    assert lines[0].startswith(f"{bad}:4:5: profiles.dev.alow")
    assert lines[1].startswith(f"{bad}:5:12: profiles.dev.deny[0]")


def test_check_missing_file() -> None:
    result = runner.invoke(app, ["policy", "check", "/nonexistent/p.yaml"])
    assert result.exit_code == 2 and "cannot read" in result.output


def test_explain_deny_names_the_rule() -> None:
    result = runner.invoke(app, ["policy", "explain", "--policy",
                                 str(ROOT / "policies" / "default.yaml"),
                                 "--tenant", "acme", "--tool", "http_request"])
    assert result.exit_code == 0, result.output
    assert "verdict: deny" in result.output
    assert "rule:    profiles.developer.deny[group:web]" in result.output


def test_explain_allow_prints_limits() -> None:
    result = runner.invoke(app, ["policy", "explain", "--policy",
                                 str(ROOT / "policies" / "strict.yaml"), "--tenant", "t",
                                 "--tool", "code_exec", "--arg", "language=python",
                                 "--timeout", "500"])
    assert result.exit_code == 0, result.output
    assert "verdict: allow" in result.output
    assert "timeout 60 s, memory 256 MiB" in result.output
    assert "image:   python" in result.output and "network: none" in result.output


def test_explain_json_and_profile_role() -> None:
    result = runner.invoke(app, ["policy", "explain", "--policy",
                                 str(ROOT / "policies" / "default.yaml"), "--tool", "terminal",
                                 "--tenant", "admin", "--profile", "server_admin",
                                 "--role", "admin", "--json"])
    body = json.loads(result.output)
    assert body["decision"]["verdict"] == "allow"
    assert body["decision"]["limits"]["timeout_s"] == 120
    bad = runner.invoke(app, ["policy", "explain", "--tool", "x", "--role", "root"])
    assert bad.exit_code == 2
