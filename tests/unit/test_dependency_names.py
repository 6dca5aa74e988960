"""No dependency of the project names a distribution that only this repository provides.

navi-client (clients/python/) is installed from the repository by scripts/setup.sh. Its name
is not registered on PyPI; naming it in pyproject.toml would make a bare `pip install .`
resolve it from an index, where anyone could publish a package of that name."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LOCAL_ONLY = {"navi-client"}


def _name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9._-]+", requirement.strip())
    assert match, requirement
    return re.sub(r"[-_.]+", "-", match.group(0)).lower()


def test_no_dependency_names_a_distribution_only_this_repository_holds() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        wanted.extend(extra)
    assert LOCAL_ONLY.isdisjoint(_name(r) for r in wanted)


def test_set_up_installs_the_client_from_the_repository() -> None:
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    assert "-e ./clients/python" in setup
    local = tomllib.loads((ROOT / "clients/python/pyproject.toml").read_text())["project"]
    assert _name(local["name"]) in LOCAL_ONLY
