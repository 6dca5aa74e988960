"""Warm pool caps: per tenant and for the whole server (the pool's launch/discard are its
engine boundary; the real launch is covered by tests/docker/test_warm.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from runtime.sandbox.docker.spec import ContainerSpec
from runtime.sandbox.docker.warm_pool import WarmContainer, WarmPool, WarmPoolConfig, warm_key


def _spec(session: str, tenant: str) -> ContainerSpec:
    return ContainerSpec(
        image="sha256:" + "0" * 64, argv=["true"], env={}, workdir="/workspace",
        user="65534:65534", labels={"navi.session": session, "navi.tenant": tenant},
        seccomp_profile="{}", memory_bytes=1 << 28, pids_limit=64, nano_cpus=10**9,
        tmp_bytes=1 << 26, nofile=256, fsize_bytes=1 << 26,
    )


async def _fill(config: WarmPoolConfig, sessions: list[tuple[str, str]]) -> WarmPool:
    async def launch(spec: ContainerSpec, key: str) -> WarmContainer:
        return WarmContainer(id=f"c-{key[:8]}", key=key, session=spec.labels["navi.session"],
                             tenant=spec.labels["navi.tenant"], image_id=spec.image,
                             attached=None)

    async def discard(container: WarmContainer) -> None:
        return None

    pool = WarmPool(config, launch, discard)
    for session, tenant in sessions:
        spec = _spec(session, tenant)
        pool.replenish(warm_key(spec), spec, session, tenant)
    await asyncio.sleep(0.05)
    return pool


async def test_total_caps_the_server(tmp_path: Path) -> None:
    sessions = [(f"s{i}", f"t{i}") for i in range(5)]
    pool = await _fill(WarmPoolConfig(size=1, per_tenant=8, total=3), sessions)
    try:
        assert pool.stats["launched"] == 3 and pool.ready_count() == 3
    finally:
        await pool.close()


async def test_per_tenant_caps_one_tenant(tmp_path: Path) -> None:
    sessions = [(f"s{i}", "same") for i in range(4)] + [("other", "t2")]
    pool = await _fill(WarmPoolConfig(size=1, per_tenant=2, total=64), sessions)
    try:
        assert pool.ready_count() == 3
        assert pool.ready_count("other") == 1
    finally:
        await pool.close()


async def test_depth_grows_for_a_busy_session_and_shrinks_when_idle() -> None:
    """A call that finds nothing ready raises the class's depth (up to ``burst``); an
    unused container that expires lowers it again (down to ``size``)."""
    landed = asyncio.Event()

    async def launch(spec: ContainerSpec, key: str) -> WarmContainer:
        await landed.wait()  # launches land only when the test says so
        return WarmContainer(id=f"c-{key[:8]}", key=key, session="s", tenant="t",
                             image_id=spec.image, attached=None)

    async def discard(container: WarmContainer) -> None:
        return None

    pool = WarmPool(WarmPoolConfig(size=1, burst=3, idle_s=0.2, ready_timeout_s=0.01),
                    launch, discard)
    spec = _spec("s", "t")
    key = warm_key(spec)
    try:
        pool.replenish(key, spec, "s", "t")
        for expected in (2, 3, 3):  # back to back: each call finds the launch still running
            assert await pool.take(key) is None
            pool.replenish(key, spec, "s", "t")
            assert pool.depth(key) == expected
        landed.set()
        await asyncio.sleep(0.05)
        assert pool.ready_count("s") == 3  # capped at burst
        await asyncio.sleep(0.5)  # all three expire unused
        assert pool.depth(key) == 1 and pool.ready_count("s") == 0
    finally:
        await pool.close()


async def test_depth_stays_within_the_tenant_cap() -> None:
    pool = await _fill(WarmPoolConfig(size=1, burst=8, per_tenant=2), [("s", "t")])
    spec = _spec("s", "t")
    key = warm_key(spec)
    try:
        for _ in range(6):
            await pool.take(key)
            pool.replenish(key, spec, "s", "t")
            await asyncio.sleep(0.01)
        assert pool.ready_count("s") <= 2
    finally:
        await pool.close()


async def test_sessions_that_come_and_go_leave_no_entries_behind() -> None:
    """A class key names one session's spec: whatever a session's calls, expiries and
    release did, the pool keeps nothing for it afterwards (the soak's per-session growth)."""
    sessions = [(f"s{i}", "t") for i in range(20)]
    pool = await _fill(WarmPoolConfig(size=1, per_tenant=64, total=64, idle_s=0.5),
                       sessions)
    try:
        for session, tenant in sessions[:10]:  # a call takes its container
            spec = _spec(session, tenant)
            assert await pool.take(warm_key(spec)) is not None
        await asyncio.sleep(0.8)  # the rest expire unused
        for session, _ in sessions:
            await pool.release_session(session)
        assert pool.ready_count() == 0
        assert not pool._ready and not pool._launching  # noqa: SLF001
        assert not pool._depth and not pool._generation  # noqa: SLF001
    finally:
        await pool.close()
