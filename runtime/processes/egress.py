"""A process's egress proxy, kept where the next server can serve it again.

A call's proxy socket is bind-mounted as a file, and a socket bound again later is a new
inode that container never sees. A process outlives its server, so its container gets a
directory instead: ``<data>/egress/proc/<id>/s`` (0755, read-only at ``MOUNT_TARGET``)
holding ``egress.sock``, a hard link to the proxy's socket, and ``NAVI_EGRESS_SOCKET`` names
that link. The allowlist the policy granted is kept beside it (``allow.json``, 0600, never
mounted). After a restart ``reopen`` starts a proxy with the same allowlist and puts a new
link in place; ``navi-egress`` in the container connects once per connection, so its next
connection reaches the new proxy (one in flight when the old server died is cut).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
from pathlib import Path

from runtime.egress import EgressProxy
from runtime.sandbox.docker.backend import DockerBackend
from runtime.sandbox.docker.spec import BindMount

MOUNT_TARGET = "/run/navi/egress-p"
SOCK = "egress.sock"
ALLOW = "allow.json"


class ProcessEgress:
    def __init__(self, backend: DockerBackend) -> None:
        self.backend = backend
        self.root = backend.config.data_dir / "egress"

    def directory(self, process_id: str) -> Path:
        return self.root / "proc" / process_id

    def mount(self, process_id: str) -> BindMount:
        return BindMount(source=str(self.directory(process_id) / "s"), target=MOUNT_TARGET,
                         read_only=True)

    @staticmethod
    def env() -> dict[str, str]:
        return {"NAVI_EGRESS_SOCKET": f"{MOUNT_TARGET}/{SOCK}"}

    async def open(self, process_id: str, allowlist: list[str]) -> EgressProxy:
        """A proxy for a new process (its allowlist kept for the next server)."""
        await asyncio.to_thread(self._write_allow, process_id, allowlist)
        return await self._serve(process_id, allowlist)

    async def reopen(self, process_id: str) -> EgressProxy | None:
        """The adopted process's proxy again; None when nothing was kept for it."""
        allowlist = await asyncio.to_thread(self._read_allow, process_id)
        return None if allowlist is None else await self._serve(process_id, allowlist)

    async def forget(self, process_id: str) -> None:
        await asyncio.to_thread(shutil.rmtree, self.directory(process_id), True)

    async def _serve(self, process_id: str, allowlist: list[str]) -> EgressProxy:
        backend = self.backend
        proxy = EgressProxy(allowlist, backend.config.egress, exec_id=process_id,
                            resolver=backend.egress_resolver, denied=backend.egress_denied)
        await proxy.start(self.root)
        try:
            assert proxy.socket_path is not None
            await asyncio.to_thread(self._link, process_id, proxy.socket_path)
        except BaseException:
            await proxy.close()
            raise
        return proxy

    def _link(self, process_id: str, socket_path: Path) -> None:
        shown = self.directory(process_id) / "s"
        shown.mkdir(mode=0o755, parents=True, exist_ok=True)
        os.chmod(shown, 0o755)
        partial = shown / (SOCK + ".new")
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()
        os.link(socket_path, partial)
        os.replace(partial, shown / SOCK)

    def _write_allow(self, process_id: str, allowlist: list[str]) -> None:
        directory = self.directory(process_id)
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(directory / ALLOW, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump(list(allowlist), out)

    def _read_allow(self, process_id: str) -> list[str] | None:
        try:
            allow = json.loads((self.directory(process_id) / ALLOW).read_text())
        except (OSError, ValueError):
            return None
        return [str(host) for host in allow] if isinstance(allow, list) else None
