"""README and docs/ document what the code does: every setting is in one of them (the table is
docs/configuration.md), none they name is made up, and README starts with the two commands."""

from __future__ import annotations

import re
from pathlib import Path

from runtime.config import Settings

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
DOCS = README + "".join(p.read_text() for p in sorted((ROOT / "docs").glob("*.md")))


def test_every_setting_is_documented() -> None:
    missing = [f"NAVI_{name.upper()}" for name in Settings.model_fields
               if f"`NAVI_{name.upper()}`" not in DOCS]
    assert missing == [], f"document these in docs/configuration.md: {missing}"


def test_docs_name_no_setting_that_does_not_exist() -> None:
    compose_only = {"NAVI_DATA_ROOT", "NAVI_BIND", "NAVI_SUPERVISOR_BASE", "NAVI_HOST_PASSWD_FILE"}
    client_side = {"NAVI_URL", "NAVI_TOKEN"}  # read by `navi mcp stdio` and the inspect provider
    known = {f"NAVI_{name.upper()}" for name in Settings.model_fields} | compose_only \
        | client_side
    named = set(re.findall(r"`(NAVI_[A-Z_]+)`", DOCS))
    assert named - known == set()


def test_readme_starts_with_the_two_commands() -> None:
    head = README[: README.index("## Setting up")]
    assert "make run" in head and "make test" in head


def test_no_code_points_to_a_design_document_outside_the_repository() -> None:
    """A docstring says the fact, or names the docs/ page that holds it."""
    word = re.compile(r"(?<![A-Z_])" + "DES" + r"IGN(?![A-Z_])")  # not spelled out: not found here
    pointing = [f"{path.relative_to(ROOT)}:{n}"
                for folder in ("runtime", "tests", "bench")
                for path in sorted((ROOT / folder).rglob("*.py"))
                for n, line in enumerate(path.read_text().splitlines(), 1)
                if word.search(line)]
    assert pointing == []


PARAM = re.compile(r"\{[^}]*\}|<[^>]*>")  # {session_id}, {id}, <path>: one parameter


def _documented_routes() -> set[str]:
    text = DOCS.replace("$S", "{id}")
    found = re.findall(r"\b(GET|POST|PUT|PATCH|DELETE) (/v1/[^\s`?,)]+)", text)
    return {method + " " + PARAM.sub("{}", path) for method, path in found}


def test_every_route_is_in_the_api_reference() -> None:
    """Each method and path of the served API (its OpenAPI document) is written somewhere in
    docs/ as `METHOD /v1/...` (docs/api.md lists them all; a feature page may too)."""
    import tempfile

    from runtime.api.app import create_app

    with tempfile.TemporaryDirectory() as data:
        spec = create_app(Settings(data_dir=Path(data))).openapi()
    served = {method.upper() + " " + PARAM.sub("{}", path)
              for path, ops in spec["paths"].items() for method in ops}
    missing = sorted(served - _documented_routes())
    assert missing == [], f"add these to docs/api.md's route tables: {missing}"
