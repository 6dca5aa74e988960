"""Helpers for tests of warm containers (shared by tests/docker and tests/security)."""

from __future__ import annotations

import asyncio
import time

import docker

from runtime.sandbox.docker.backend import DockerBackend


async def wait_ready(backend: DockerBackend, session: str, count: int = 1) -> None:
    """Until the pool holds ``count`` ready containers for ``session`` (at most 20 s)."""
    deadline = time.monotonic() + 20
    while backend.warm.ready_count(session) < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"no warm container became ready: {dict(backend.warm.stats)}")
        await asyncio.sleep(0.02)


async def gone(api: docker.APIClient, container: str, within_s: float = 10) -> bool:
    """Whether the container is removed from the engine within ``within_s``."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not api.containers(all=True, filters={"id": container}):
            return True
        await asyncio.sleep(0.05)
    return False
