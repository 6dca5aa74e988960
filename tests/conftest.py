"""Shared test set-up: engine tests are marked `docker`; in CI they must run, never skip."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

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


@pytest.fixture(scope="session", autouse=True)
def _release_test_mounts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A supervisor killed by a test (SIGKILL) leaves its nosuid,nodev workspaces-root bind
    mount behind; release those under this run's temp dir so the temp dir stays removable."""
    yield
    base = os.path.realpath(tmp_path_factory.getbasetemp())
    with open("/proc/self/mounts", encoding="utf-8") as mounts:
        points = [line.split()[1].replace("\\040", " ") for line in mounts]
    for point in sorted(points, key=len, reverse=True):
        if point.startswith(base + os.sep):
            subprocess.run(["umount", "--lazy", point], check=False, capture_output=True)


@pytest.fixture(autouse=True)
def _reset_structlog():
    """A CLI test may point logging at a CliRunner stream that is closed afterwards."""
    yield
    import structlog

    structlog.reset_defaults()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """aiosqlite's worker threads are not daemons: a connection left open by a failing test
    would keep the interpreter (and CI) from ever exiting. Stop any still running; the
    failure itself is already reported."""
    import gc

    import aiosqlite

    for obj in gc.get_objects():
        try:
            if type(obj) is aiosqlite.Connection and obj._running:  # noqa: SLF001
                obj.stop()
        except ReferenceError:  # a dead weak proxy
            continue
