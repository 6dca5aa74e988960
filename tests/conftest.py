"""Shared test set-up: engine tests are marked `docker`; in CI they must run, never skip."""

from __future__ import annotations

import getpass
import os
import subprocess
import tempfile
from collections.abc import Iterator

import pytest

from tests.docker.cluster_rig import close_after, shared_local_cluster  # noqa: F401 - fixture


def _engine_reachable() -> str | None:
    try:
        import docker

        client = docker.from_env(timeout=5)
        client.ping()
        client.close()
        return None
    except Exception as exc:  # any failure means: no engine
        return f"{type(exc).__name__}: {exc}"


def _release_mounts_under(root: str) -> None:
    with open("/proc/self/mounts", encoding="utf-8") as mounts:
        points = [line.split()[1].replace("\\040", " ") for line in mounts]
    for point in sorted(points, key=len, reverse=True):
        if point.startswith(root.rstrip(os.sep) + os.sep):
            subprocess.run(["umount", "--lazy", point], check=False, capture_output=True)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Before pytest removes old temp dirs: a supervisor killed outside this run's control
    (kill -9, a crashed CI job) may have left a mount under an old run's dir, and removing a
    busy mount point fails the run ("Device or resource busy", warnings are errors). Release
    mounts under ended runs' dirs only: a run still going holds its ``.lock``."""
    if os.geteuid() != 0 or config.option.basetemp:
        return
    user = getpass.getuser()
    root = os.path.join(tempfile.gettempdir(), f"pytest-of-{user}")
    try:
        runs = [entry for entry in os.scandir(root) if entry.is_dir(follow_symlinks=False)]
    except OSError:
        return
    for run in runs:
        if not os.path.exists(os.path.join(run.path, ".lock")):
            _release_mounts_under(os.path.realpath(run.path))


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
    _release_mounts_under(os.path.realpath(tmp_path_factory.getbasetemp()))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """The run's shared local cluster (tests/docker/cluster_rig.py) goes down after the
    teardown of the last test that may use it, not at the end of the run."""
    try:
        return (yield)
    finally:
        close_after(item)


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
