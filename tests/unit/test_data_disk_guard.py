"""runtime.api.data_disk in-process: which requests a full data disk refuses."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from runtime.api.data_disk import DataDiskGuard


async def _ok(request: object) -> PlainTextResponse:
    return PlainTextResponse("ok")


def _statuses(data_dir: Path, floor: int, methods: tuple[str, ...]
              ) -> list[httpx.Response]:
    app = Starlette(routes=[Route("/x", _ok, methods=["GET", "POST", "PUT", "DELETE"])])
    app.add_middleware(DataDiskGuard, data_dir=data_dir, floor_bytes=floor)

    async def go() -> list[httpx.Response]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://t") as client:
            return [await client.request(m, "/x") for m in methods]
    return asyncio.run(go())


def test_a_full_disk_refuses_writes_with_507_and_lets_reads_and_deletes_pass(
        tmp_path: Path) -> None:
    post, put, get, delete = _statuses(tmp_path, 2**62, ("POST", "PUT", "GET", "DELETE"))
    for resp in (post, put):
        assert resp.status_code == 507
        assert resp.json()["error"]["code"] == "disk_full"
        assert resp.headers["retry-after"] == "5"
    assert get.status_code == 200 and delete.status_code == 200


def test_room_enough_passes_and_a_missing_data_dir_is_left_to_the_routes(
        tmp_path: Path) -> None:
    assert _statuses(tmp_path, 1, ("POST",))[0].status_code == 200
    assert _statuses(tmp_path / "absent", 2**62, ("POST",))[0].status_code == 200
    assert not (tmp_path / ".navi-write-probe").exists()


class _SlowDisk(DataDiskGuard):
    """A data disk that takes `LOOK_S` to answer each look (as a failing one may)."""

    LOOK_S = 0.2

    def look(self) -> tuple[int, str, str] | None:
        time.sleep(self.LOOK_S)
        return super().look()


def test_a_slow_disk_never_stalls_the_event_loop_and_busy_writers_never_wait(
        tmp_path: Path) -> None:
    app = Starlette(routes=[Route("/x", _ok, methods=["POST"])])
    app.add_middleware(_SlowDisk, data_dir=tmp_path, floor_bytes=1)

    async def go() -> tuple[float, list[float], float]:
        ticks: list[float] = []

        async def ticker() -> None:  # what every other tenant's requests need: the loop
            while True:
                ticks.append(time.monotonic())
                await asyncio.sleep(0.01)

        beat = asyncio.create_task(ticker())
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://t") as client:
            started = time.monotonic()
            assert (await client.post("/x")).status_code == 200
            first = time.monotonic() - started  # idle until now: waits for one look
            later = []
            for _ in range(8):  # busy: judged by the background's looks, no waiting
                await asyncio.sleep(0.1)
                started = time.monotonic()
                assert (await client.post("/x")).status_code == 200
                later.append(time.monotonic() - started)
        beat.cancel()
        longest_gap = max(b - a for a, b in zip(ticks, ticks[1:], strict=False))
        return first, later, longest_gap

    first, later, longest_gap = asyncio.run(go())
    assert first >= _SlowDisk.LOOK_S
    assert max(later) < 0.1, later
    assert longest_gap < 0.1, f"the loop stalled {longest_gap:.3f} s"


class _CountedDisk(DataDiskGuard):
    """Counts its looks; ``READ_ONLY`` makes every look say the disk is read-only."""

    READ_ONLY = False

    def __init__(self, *args: object, **kw: object) -> None:
        super().__init__(*args, **kw)  # type: ignore[arg-type]
        self.looks = 0

    def look(self) -> tuple[int, str, str] | None:
        self.looks += 1
        if self.READ_ONLY:
            return (503, "data_readonly", "read-only")
        return super().look()


async def _post(app: Starlette) -> int:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://t") as client:
        return (await client.post("/x")).status_code


def _guard_of(app: Starlette) -> _CountedDisk:
    layer = app.middleware_stack
    while not isinstance(layer, _CountedDisk):
        layer = layer.app  # type: ignore[union-attr]
    return layer


def test_the_background_stops_looking_when_the_server_shuts_down(tmp_path: Path) -> None:
    app = Starlette(routes=[Route("/x", _ok, methods=["POST"])])
    app.add_middleware(_CountedDisk, data_dir=tmp_path, floor_bytes=1)

    async def go() -> tuple[int, int]:
        inbox: asyncio.Queue[dict[str, str]] = asyncio.Queue()
        outbox: asyncio.Queue[dict[str, str]] = asyncio.Queue()
        lifespan = asyncio.create_task(app({"type": "lifespan", "state": {}},
                                           inbox.get, outbox.put))  # type: ignore[arg-type]
        await inbox.put({"type": "lifespan.startup"})
        assert (await outbox.get())["type"] == "lifespan.startup.complete"
        assert await _post(app) == 200  # the background starts looking, for ACTIVE_S
        await inbox.put({"type": "lifespan.shutdown"})
        assert (await outbox.get())["type"] == "lifespan.shutdown.complete"
        await lifespan
        guard = _guard_of(app)
        at_shutdown = guard.looks
        await asyncio.sleep(0.8)  # the loop lives on (as under uvicorn's last steps)
        return at_shutdown, guard.looks

    at_shutdown, later = asyncio.run(go())
    assert later == at_shutdown, f"{later - at_shutdown} looks after the shutdown"


def test_a_read_only_disk_is_looked_at_only_when_a_write_request_asks(tmp_path: Path) -> None:
    app = Starlette(routes=[Route("/x", _ok, methods=["POST"])])
    app.add_middleware(_CountedDisk, data_dir=tmp_path, floor_bytes=1)

    async def go() -> tuple[list[int], int, int]:
        _CountedDisk.READ_ONLY = True
        try:
            first = await _post(app)
            guard = _guard_of(app)
            await asyncio.sleep(0.8)  # three background looks, were it still looking
            idle_looks = guard.looks
            second = await _post(app)  # judged by a fresh look, not the old one
            return [first, second], idle_looks, guard.looks
        finally:
            _CountedDisk.READ_ONLY = False

    statuses, idle_looks, after_second = asyncio.run(go())
    assert statuses == [503, 503]
    assert idle_looks == 1
    assert after_second == 2
