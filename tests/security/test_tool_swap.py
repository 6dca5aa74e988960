"""The hash of an agent-written tool governs what runs, not what a path held when checked.

Swap attacks from the tenancy review: a tool's file is replaced (by `write_tool`, as a
tenant may) between the hash check and the container's start -- while a warm container of
the tool waits, or while an approval is pending. Whatever runs must be exactly the content
whose hash the call's audit intent records: the runner reports the SHA-256 it executed.
Red with the content-addressed mount switched off (mounting the tool's own path).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest

from runtime.executor import Executor
from runtime.policy import Subject
from runtime.policy.decision import Action, Decision
from runtime.sandbox.docker.backend import DockerBackend, DockerBackendConfig
from runtime.sandbox.docker.warm_pool import WarmPoolConfig
from runtime.tools import ToolContext, ToolServices
from runtime.tools.base import ToolResult
from runtime.tools.user.descriptor import content_hash
from tests.docker.tool_rig import docker_tool_rig
from tests.docker.warm_fixtures import wait_ready
from tests.fakes.calls import call

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("runner_image")]


def version(tag: str) -> str:
    return (f'name = "probe"\ndescription = "says which version ran"\n'
            f'parameters = {{"type": "object"}}\n'
            f"async def execute(params):\n    return {tag!r}\n")


Rig = tuple[ToolServices, ToolContext, Executor]


@pytest.fixture
def backend_config(backend_config: DockerBackendConfig) -> DockerBackendConfig:
    return backend_config.model_copy(update={"warm": WarmPoolConfig(size=1, burst=1)})


async def make_rig(tmp_path: Path, backend: DockerBackend, backend_config: DockerBackendConfig,
                   policy: str, profile: str, tenant_name: str | None,
                   stack: AsyncExitStack, approver: Any = None) -> Rig:
    rig = await stack.enter_async_context(docker_tool_rig(
        tmp_path, backend, backend_config, policy=policy, approver=approver,
        tenant_name=tenant_name, profile=profile))
    return rig.services, rig.ctx(), rig.executor


async def store(services: ToolServices, ctx: ToolContext, tag: str) -> str:
    reg = services.registry
    written = await call(reg, "write_tool", {"name": "probe", "code": version(tag)}, ctx)
    assert written.success, written
    assert (await call(reg, "reload_tools", {}, ctx)).success
    return content_hash(version(tag).encode())


def assert_ran(result: ToolResult, tag: str, digest: str) -> None:
    assert result.success, result
    assert result.output == tag, f"asked for {tag}, ran {result.output}"
    assert result.metadata["tool_hash"] == digest  # what the intent records
    assert result.metadata["ran_sha256"] == digest  # what the runner executed


async def test_a_warm_container_runs_only_the_content_it_was_made_for(
    tmp_path: Path, backend: DockerBackend, backend_config: DockerBackendConfig,
) -> None:
    async with AsyncExitStack() as stack:
        services, ctx, _ = await make_rig(tmp_path, backend, backend_config, "default.yaml",
                                          "developer", None, stack)
        reg = services.registry
        v1 = await store(services, ctx, "v1")
        assert_ran(await call(reg, "probe", {}, ctx), "v1", v1)
        await wait_ready(backend, ctx.subject.session)  # a warm container for the next call
        v2 = await store(services, ctx, "v2")  # replaced while that container waits
        assert_ran(await call(reg, "probe", {}, ctx), "v2", v2)
        await wait_ready(backend, ctx.subject.session)
        assert await store(services, ctx, "v1") == v1  # v1 back: its check passes again
        assert_ran(await call(reg, "probe", {}, ctx), "v1", v1)
        assert backend.warm.stats["taken"] >= 1  # warm containers were in play


async def test_a_swap_during_a_pending_approval_does_not_run(
    tmp_path: Path, backend: DockerBackend, backend_config: DockerBackendConfig,
) -> None:
    """lab.yaml's student: user tools ask on hash_change. While the ask for v1 is pending,
    v2 is written; the approved call still runs v1, the content the human saw the hash of."""
    swap: list[Callable[[], Any]] = []
    asked: list[str | None] = []

    async def approver(subject: Subject, action: Action, decision: Decision) -> bool:
        asked.append(action.tool_hash)
        for step in swap:
            await step()
        return True

    async with AsyncExitStack() as stack:
        services, ctx, _ = await make_rig(tmp_path, backend, backend_config, "lab.yaml",
                                          "student", "physics", stack, approver)
        v1 = await store(services, ctx, "v1")
        swap.append(lambda: store(services, ctx, "v2"))
        result = await call(services.registry, "probe", {}, ctx)
        assert asked == [v1]  # the approval request named v1's hash
        assert_ran(result, "v1", v1)
        swap.clear()
        v2 = content_hash(version("v2").encode())
        assert_ran(await call(services.registry, "probe", {}, ctx), "v2", v2)
        assert asked == [v1, v2]  # a changed hash asks again
    await asyncio.sleep(0)
