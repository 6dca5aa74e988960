"""runtime.api.data_disk in-process: which requests a full data disk refuses."""

from __future__ import annotations

import asyncio
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
