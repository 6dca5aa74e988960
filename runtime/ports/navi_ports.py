#!/usr/bin/python3 -IS
"""navi-ports [--serve SOCK] [--listen PORTS] [--follow] -- ARGV: the in-container side of ports.

Standalone (stdlib only): the supervisor copies this file into a session's ports directory
and bind-mounts it read-only into the session's containers; it is never imported there.
The container has no network but ``lo`` and may not create a host socket (gVisor), so every
path goes OUT through a unix socket the supervisor listens on:

- ``--serve SOCK`` (a process that declared ports): a control connection to SOCK says
  ``SERVE``; for each ``OPEN <id> <port>`` line the supervisor sends, a fresh connection to
  127.0.0.1:<port> inside this container is made and handed back over a new connection to
  SOCK that starts ``DATA <id> ok`` (or ``DATA <id> refused`` while nothing listens). The
  control connection is made again whenever it drops (a supervisor restart).
- ``--listen 8000,5173`` (the session's other calls, processes, kernels): a listener on each
  127.0.0.1:<port>; each connection it accepts is passed to the session's broker socket
  (``connect.sock`` beside this file) after a ``CONNECT <port>`` line, which bridges it to
  the process serving that port.
- ``--follow`` (a kernel, which outlives the session's processes): a watch connection to
  ``connect.sock`` says ``WATCH``; the broker answers ``PORTS 8000,5173`` now and whenever the
  session's running ports change, and the relay listens on exactly those (a port the
  program holds itself is skipped). The watch is made again whenever it drops.

Listeners are bound before ARGV runs (no race: connections wait in the backlog); a detached
relay (reparented to the container's init, gone with the container) does the rest, and ARGV
is exec'd in this process, so its exit status, stdin and signals are its own.
"""

import os
import socket
import sys
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
BROKER = os.path.join(HERE, "connect.sock")
USAGE = "usage: navi-ports [--serve SOCK] [--listen PORTS] [--follow] -- ARGV"


def relay(listeners: Any, serve: Any, follow: bool = False) -> None:
    import asyncio
    import functools

    async def pipe(reader: Any, writer: Any) -> None:
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                writer.write(data)
                await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()
        except OSError:
            writer.close()

    async def splice(a: Any, b: Any) -> None:
        await asyncio.gather(pipe(a[0], b[1]), pipe(b[0], a[1]))
        a[1].close()
        b[1].close()

    async def accepted(port: int, reader: Any, writer: Any) -> None:
        try:
            up = await asyncio.open_unix_connection(BROKER)
            up[1].write(b"CONNECT %d\n" % port)
            answer = await up[0].readline()
        except OSError:
            writer.close()
            return
        if answer.strip() != b"ok":
            up[1].close()
            writer.close()
            return
        await splice((reader, writer), up)

    async def opened(conn_id: bytes, port: int) -> None:
        try:
            local = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 5)
        except (TimeoutError, OSError):
            local = None
        try:
            back = await asyncio.open_unix_connection(serve)
        except OSError:
            if local:
                local[1].close()
            return
        back[1].write(b"DATA %s %s\n" % (conn_id, b"ok" if local else b"refused"))
        if local is None:
            back[1].close()
            return
        await splice(local, back)

    async def lines_of(path: str, hello: bytes) -> Any:
        """The words of each line `path` sends after `hello`; reconnects, backing off."""
        delay = 0.05
        while True:
            try:
                reader, writer = await asyncio.open_unix_connection(path)
                writer.write(hello)
                await writer.drain()
                delay = 0.05
                while True:
                    line = await reader.readline()
                    if not line:
                        break
                    yield line.split()
                writer.close()
            except OSError:
                pass
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

    async def control() -> None:
        async for parts in lines_of(serve, b"SERVE\n"):
            if len(parts) == 3 and parts[0] == b"OPEN" and parts[2].isdigit():
                asyncio.ensure_future(opened(parts[1], int(parts[2])))

    async def listen(port: int, sock: Any = None) -> Any:
        handler = functools.partial(accepted, port)
        if sock is not None:
            return await asyncio.start_server(handler, sock=sock)
        return await asyncio.start_server(handler, "127.0.0.1", port, reuse_address=True)

    async def watch(bound: Any) -> None:
        async for parts in lines_of(BROKER, b"WATCH\n"):
            if not parts or parts[0] != b"PORTS":
                continue
            listed = parts[1].split(b",") if len(parts) > 1 else []
            wanted = {int(p) for p in listed if p.isdigit() and 1024 <= int(p) <= 65535}
            for port in [p for p in bound if p not in wanted]:
                bound.pop(port).close()
            for port in sorted(wanted - set(bound)):
                try:
                    bound[port] = await listen(port)
                except OSError:  # the program holds that port itself
                    pass

    async def main() -> None:
        bound = {}
        for port, sock in listeners:
            bound[port] = await listen(port, sock)
        if follow:
            asyncio.ensure_future(watch(bound))
        if serve:
            await control()
        else:
            await asyncio.Event().wait()

    asyncio.run(main())


def parse(argv: Any) -> Any:
    serve, ports, follow = None, [], False
    while argv and argv[0] != "--":
        if argv[0] == "--follow":
            follow, argv = True, argv[1:]
            continue
        flag, value, argv = argv[0], argv[1] if len(argv) > 1 else "", argv[2:]
        if flag == "--serve":
            serve = value
        elif flag == "--listen":
            ports = [int(p) for p in value.split(",") if p.isdigit()]
        else:
            raise SystemExit(USAGE)
    return serve, ports, follow, argv[1:]


def main() -> None:
    serve, ports, follow, argv = parse(sys.argv[1:])
    if not argv:
        sys.stderr.write(USAGE + "\n")
        sys.exit(2)
    listeners = []
    for port in ports:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:  # the program may use that port itself
            sock.close()
            continue
        sock.listen(128)
        listeners.append((port, sock))
    if listeners or serve or follow:
        if os.fork() == 0:  # the child forks the relay and exits: init adopts the relay
            if os.fork() == 0:
                os.setsid()  # a signal to the program's process group spares the relay
                null = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(null, fd)
                try:
                    relay(listeners, serve, follow)
                finally:
                    os._exit(0)
            os._exit(0)
        os.wait()
        for _, sock in listeners:
            sock.close()
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        sys.stderr.write(f"navi: cannot run {argv[0]!r}: {exc.strerror}\n")
        sys.exit(127 if isinstance(exc, FileNotFoundError) else 126)


if __name__ == "__main__":
    main()
