"""Policy files: strict validation, and every error names the file, line and column."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.errors import ConfigError
from runtime.policy import PolicyFileError, load_policy, parse_policy

ROOT = Path(__file__).resolve().parents[2]

MINIMAL = """\
version: 1
profiles:
  developer:
    allow: [code_exec]
tenants:
  "*":
    profiles: [developer]
"""


def _error(text: str) -> PolicyFileError:
    with pytest.raises(PolicyFileError) as info:
        parse_policy(text, "p.yaml")
    return info.value


@pytest.mark.parametrize("name", ["default.yaml", "strict.yaml", "lab.yaml"])
def test_shipped_policies_validate(name: str) -> None:
    policy = load_policy(ROOT / "policies" / name)
    assert policy.version == 1
    assert policy.profiles


def test_minimal_policy_parses() -> None:
    policy = parse_policy(MINIMAL)
    assert policy.profiles["developer"].allow == ["code_exec"]


def test_unknown_key_is_reported_at_its_line_and_column() -> None:
    text = MINIMAL.replace("    allow: [code_exec]", "    allow: [code_exec]\n    alow: [terminal]")
    err = _error(text)
    assert isinstance(err, ConfigError)
    problem = err.problems[0]
    assert (problem["line"], problem["column"]) == (5, 5)
    assert problem["path"] == "profiles.developer.alow"
    assert "p.yaml:5:5" in str(err)
    assert "Extra inputs are not permitted" in str(err)


def test_bad_value_points_at_the_value() -> None:
    text = MINIMAL + "defaults:\n  limits:\n    timeout_s: 9000\n"
    err = _error(text)
    assert err.problems[0]["path"] == "defaults.limits.timeout_s"
    assert err.problems[0]["line"] == 10


def test_unknown_group_points_at_the_list_item() -> None:
    err = _error(MINIMAL.replace("allow: [code_exec]", "allow: [code_exec, group:nope]"))
    assert err.problems[0]["path"] == "profiles.developer.allow[1]"
    assert err.problems[0]["line"] == 4
    assert "unknown group" in err.problems[0]["message"]


def test_duplicate_key_is_rejected() -> None:
    line = "    allow: [code_exec]"
    text = MINIMAL.replace(line, line + "\n    allow: [terminal]")
    err = _error(text)
    assert "duplicate key" in str(err)
    assert err.problems[0]["line"] == 5


def test_tenant_naming_a_missing_profile() -> None:
    err = _error(MINIMAL.replace("profiles: [developer]", "profiles: [developer, ghost]"))
    assert err.problems[0]["path"] == "tenants.*.profiles[1]"
    assert "no profile 'ghost'" in err.problems[0]["message"]
    assert err.problems[0]["line"] == 7


def test_egress_host_must_be_on_the_server_allowlist() -> None:
    text = MINIMAL.replace(
        "    allow: [code_exec]",
        "    allow: [code_exec]\n    tools:\n      code_exec:\n        network: egress\n"
        "        egress: [evil.example]",
    )
    err = _error(text)
    assert err.problems[0]["path"] == "profiles.developer.tools.code_exec.egress[0]"


def test_egress_names_only() -> None:
    err = _error(MINIMAL + "network:\n  egress_allowlist: ['http://x.org:80/']\n")
    assert "host name" in err.problems[0]["message"]


def test_missing_version() -> None:
    err = _error(MINIMAL.replace("version: 1\n", ""))
    assert err.problems[0]["path"] == "version"
    assert "Field required" in err.problems[0]["message"]


@pytest.mark.parametrize(
    "text,needle",
    [
        ("", "empty"),
        ("- a\n- b\n", "mapping"),
        ("version: [1\n", "not valid YAML"),
        ("version: !!python/object:os.system x\n", "not valid YAML"),
        ("a: &x {b: 1}\nc:\n  <<: *x\n", "merge keys"),
    ],
)
def test_malformed_files(text: str, needle: str) -> None:
    assert needle in str(_error(text))


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(PolicyFileError, match="cannot read"):
        load_policy(tmp_path / "missing.yaml")
    bad = tmp_path / "bin.yaml"
    bad.write_bytes(b"\xff\xfe")
    with pytest.raises(PolicyFileError, match="UTF-8"):
        load_policy(bad)
