"""Shared test set-up: engine-dependent tests are marked `docker`; in CI they must run, never skip."""

from __future__ import annotations

import os

import pytest


def _engine_reachable() -> str | None:
    try:
        import docker

        client = docker.from_env(timeout=5)
        client.ping()
        client.close()
        return None
    except Exception as exc:  # any failure means: no engine
        return f"{type(exc).__name__}: {exc}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not any(item.get_closest_marker("docker") for item in items):
        return
    problem = _engine_reachable()
    if problem is None:
        return
    if os.environ.get("CI") == "true":
        raise pytest.UsageError(f"CI=true but the Docker engine is unavailable: {problem}")
    skip = pytest.mark.skip(reason=f"Docker engine unavailable: {problem}")
    for item in items:
        if item.get_closest_marker("docker"):
            item.add_marker(skip)
