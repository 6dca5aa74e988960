"""`PortsHub`: every session's ports broker, and how containers are given the relay.

The process launcher calls ``for_process`` before creating a container for a process that
declared ports (and ``process_ended`` once it is gone); calls and processes of a session
with ported processes running go through ``for_call``, which gives them a listener on
127.0.0.1:<port> for each; a kernel's container goes through ``for_kernel``, whose relay
follows the running ports as they come and go. All only add read-only mounts and put
``navi-ports`` in front of argv: the container keeps ``--network none`` and nothing is
published on the host.
"""

from __future__ import annotations

import asyncio
import re
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from runtime.errors import InvalidInput, NotFound
from runtime.logging import get_logger
from runtime.ports.broker import RELAY_NAME, SERVE_SOCK, SessionBroker, Stream
from runtime.sandbox.models import Invocation, Mount

log = get_logger(__name__)

PORTS_TARGET = "/run/navi/ports"
SERVE_TARGET = "/run/navi/serve"
PORT_MIN, PORT_MAX = 1024, 65535
R = TypeVar("R", bound=Invocation)
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
RemoteOpener = Callable[[int], Awaitable[Stream]]


def check_port(port: int) -> int:
    if not PORT_MIN <= port <= PORT_MAX:
        raise InvalidInput(f"port {port} is outside {PORT_MIN}-{PORT_MAX}")
    return port


def _safe(name: str, what: str) -> str:
    if not _ID.fullmatch(name) or name in {".", ".."}:
        raise InvalidInput(f"{what} {name[:64]!r} cannot name a ports directory")
    return name


class PortsHub:
    """Per server: ``<root>/s/<session>`` (shared by the session's containers) and
    ``<root>/p/<session>/<process>`` (one process's serve socket)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._brokers: dict[str, SessionBroker] = {}
        self._session_of: dict[str, str] = {}  # process id -> session
        # ports of processes on cluster nodes: session -> port -> (process id, opener)
        self._remote: dict[str, dict[int, tuple[str, RemoteOpener]]] = {}

    async def _broker(self, session: str) -> SessionBroker:
        broker = self._brokers.get(session)
        if broker is None:
            name = _safe(session, "session id")
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            broker = SessionBroker(session, self.root / "s" / name, self.root / "p" / name)
            await broker.start()
            self._brokers[session] = broker
        return broker

    # -- the process launcher's hook --------------------------------------------------------

    async def relay_for_process(self, session: str, process_id: str,
                                ports: list[int] | tuple[int, ...]
                                ) -> tuple[list[Mount], list[str]] | None:
        """The mounts and the argv prefix (ending ``--``) of a process container: its
        declared ports served through the relay, the session's other running ports listened
        on. Registers the ports; None when the session has no ports at all."""
        declared = tuple(sorted({check_port(p) for p in ports}))
        others = self.running_ports(session)
        if not declared and not others:
            return None
        broker = await self._broker(session)
        mounts = [Mount(source=broker.directory, target=PORTS_TARGET)]
        argv = ["python3", "-IS", f"{PORTS_TARGET}/{RELAY_NAME}"]
        if declared:
            serve_dir = await broker.add_process(_safe(process_id, "process id"), declared)
            self._session_of[process_id] = session
            mounts.append(Mount(source=serve_dir, target=SERVE_TARGET))
            argv += ["--serve", f"{SERVE_TARGET}/{SERVE_SOCK}"]
        listen = sorted(p for p in others if p not in declared)
        if listen:
            argv += ["--listen", ",".join(map(str, listen))]
        return mounts, [*argv, "--"]

    async def for_process(self, session: str, process_id: str, ports: list[int] | tuple[int, ...],
                          invocation: Invocation) -> Invocation:
        """``relay_for_process`` applied to an invocation."""
        relay = await self.relay_for_process(session, process_id, ports)
        if relay is None:
            return invocation
        mounts, prefix = relay
        return invocation.model_copy(update={"argv": [*prefix, *invocation.argv],
                                             "mounts": [*invocation.mounts, *mounts]})

    async def adopt(self, session: str, process_id: str, ports: list[int] | tuple[int, ...]
                    ) -> None:
        """A process that outlived a server restart: its serve socket again, at the path its
        relay reconnects to (the directories stayed; only the sockets were closed)."""
        if ports:
            broker = await self._broker(session)
            await broker.add_process(_safe(process_id, "process id"),
                                     tuple(sorted(set(ports))))
            self._session_of[process_id] = session

    def add_remote(self, session: str, process_id: str, ports: list[int],
                   opener: RemoteOpener) -> None:
        """A process on a cluster node declared ``ports``: its node's agent is the way to
        them (``runtime.cluster.agent.ports``); ``opener(port)`` is a stream to one."""
        taken = self._remote.setdefault(session, {})
        for port in ports:
            taken[check_port(port)] = (process_id, opener)

    async def process_ended(self, process_id: str) -> None:
        for remote_session, taken in list(self._remote.items()):
            for port in [p for p, (owner, _) in taken.items() if owner == process_id]:
                del taken[port]
            if not taken:
                del self._remote[remote_session]
        session = self._session_of.pop(process_id, None)
        broker = self._brokers.get(session) if session is not None else None
        if broker is not None and session is not None:
            await broker.remove_process(process_id, forget=True)
            if not broker.ports():
                await broker.close()
                self._brokers.pop(session, None)

    # -- everything else a session runs ------------------------------------------------------

    def for_call(self, session: str, invocation: R) -> R:
        """A listener on 127.0.0.1:<port> for each port of the session's running processes."""
        broker = self._brokers.get(session)
        ports = sorted(broker.ports()) if broker is not None else []
        if broker is None or not ports or any(m.target == PORTS_TARGET
                                              for m in invocation.mounts):
            return invocation
        mounts = [*invocation.mounts, Mount(source=broker.directory, target=PORTS_TARGET)]
        argv = ["python3", "-IS", f"{PORTS_TARGET}/{RELAY_NAME}",
                "--listen", ",".join(map(str, ports)), "--", *invocation.argv]
        return invocation.model_copy(update={"argv": argv, "mounts": mounts})

    async def for_kernel(self, session: str, request: R) -> R:
        """A kernel's container (it outlives the session's processes): the relay follows
        the session's running ports, listening on 127.0.0.1:<port> for each as they come
        and go (``--follow``), those running now bound before the kernel starts."""
        if any(m.target == PORTS_TARGET for m in request.mounts):
            return request
        broker = await self._broker(session)
        argv = ["python3", "-IS", f"{PORTS_TARGET}/{RELAY_NAME}", "--follow"]
        if ports := sorted(broker.ports()):
            argv += ["--listen", ",".join(map(str, ports))]
        mounts = [*request.mounts, Mount(source=broker.directory, target=PORTS_TARGET)]
        return request.model_copy(update={"argv": [*argv, "--", *request.argv],
                                          "mounts": mounts})

    # -- the proxy's side ---------------------------------------------------------------------

    def running_ports(self, session: str) -> dict[int, str]:
        broker = self._brokers.get(session)
        found = broker.ports() if broker is not None else {}
        remote = self._remote.get(session)
        if remote:
            found = {**found, **{port: owner for port, (owner, _) in remote.items()}}
        return found

    def running_port(self, session: str, port: int) -> str | None:
        """The running process of ``session`` that declared ``port``, if any."""
        return self.running_ports(session).get(port)

    async def open(self, session: str, port: int) -> Stream:
        remote = self._remote.get(session, {}).get(port)
        if remote is not None:
            return await remote[1](port)
        broker = self._brokers.get(session)
        if broker is None or port not in broker.ports():
            raise NotFound(f"no running process of this session declares port {port}")
        return await broker.open(port)

    async def release_session(self, session: str) -> None:
        """The session is gone: its sockets and directories too."""
        self._remote.pop(session, None)
        broker = self._brokers.pop(session, None)
        if broker is not None:
            for process_id in list(broker.ports().values()):
                self._session_of.pop(process_id, None)
            await broker.close(forget=True)
        name = _safe(session, "session id")  # a broker closed earlier left its directories
        for directory in (self.root / "s" / name, self.root / "p" / name):
            await asyncio.to_thread(shutil.rmtree, directory, True)

    async def close(self) -> None:
        """Sockets closed, directories kept: running process containers have them mounted
        and their relays reconnect to the next server's sockets at the same paths."""
        for broker in self._brokers.values():
            await broker.close()
        self._brokers.clear()
