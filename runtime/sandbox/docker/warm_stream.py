"""End of a warm call: spot the runner's trailer on stdout and stderr (``warm_runner.py``).

``TrailerCapture`` wraps a stream's ``StreamCapture`` for ``attach.pump_output``: it passes
the job's bytes through at once, holding back only a tail that could begin the trailer, and
strips the trailer. ``Trailers`` fires ``on_end`` when both streams have shown theirs (each
stream is ordered, so all of the job's output is in): the backend then closes the attach
socket, which ends the pump, instead of waiting for the engine to tear the container down.
Without trailers (the runner died) the call ends at EOF, as a cold one.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

from runtime.sandbox.docker.capture import StreamCapture
from runtime.sandbox.docker.warm_runner import END

MAX_CODE = 12  # "-NN" or "NNN" and the newline, with room


class Trailers:
    def __init__(self, nonce: str, on_end: Callable[[], None]) -> None:
        self.prefix = END + nonce.encode() + b":"
        self.codes: dict[str, int] = {}
        self._on_end = on_end
        self._lock = threading.Lock()

    def seen(self, stream: str, code: int) -> None:
        with self._lock:
            self.codes[stream] = code
            done = len(self.codes) == 2
        if done:
            self._on_end()

    @property
    def code(self) -> int | None:
        """The job's exit status (negative: killed by that signal) once both trailers came."""
        if len(self.codes) == 2 and len(set(self.codes.values())) == 1:
            return next(iter(self.codes.values()))
        return None


class TrailerCapture:
    """Duck-types ``StreamCapture.feed`` / ``name`` for the pump.

    Only bytes that may begin the trailer are held back (a tail of the buffer that is a
    prefix of it, or the trailer itself until its newline), so live output streams as it
    comes; everything else goes straight through.
    """

    def __init__(self, inner: StreamCapture, trailers: Trailers) -> None:
        self.inner = inner
        self.name = inner.name
        self._trailers = trailers
        self._held = b""
        self._ended = False

    def feed(self, data: bytes) -> bytes:
        if self._ended:
            return b""  # a straggler of the job's after its end: the container is going away
        buf, self._held = self._held + data, b""
        prefix = self._trailers.prefix
        at = buf.find(prefix)
        if at < 0:
            cut = _partial_start(buf, prefix)
            self._held = buf[cut:]
            return self.inner.feed(buf[:cut])
        tail = buf[at + len(prefix):]
        newline = tail.find(b"\n")
        if newline < 0 and len(tail) <= MAX_CODE:  # the rest of the trailer is on its way
            self._held = buf[at:]
            return self.inner.feed(buf[:at])
        try:
            code = int(tail[:newline]) if newline >= 0 else None
        except ValueError:
            code = None
        if code is None:  # not a trailer after all: those bytes are the job's
            end = at + len(prefix)
            return self.inner.feed(buf[:end]) + self.feed(buf[end:])
        self._ended = True
        live = self.inner.feed(buf[:at])
        self._trailers.seen(self.name, code)
        return live

    def flush(self) -> bytes:
        """At EOF without a trailer: the held-back bytes are the job's."""
        held, self._held = self._held, b""
        return self.inner.feed(held) if held and not self._ended else b""


def _partial_start(buf: bytes, prefix: bytes) -> int:
    """Where the longest tail of ``buf`` that is a proper prefix of ``prefix`` starts."""
    first = prefix[:1]
    at = buf.find(first, max(0, len(buf) - len(prefix) + 1))
    while at >= 0:
        if prefix.startswith(buf[at:]):
            return at
        at = buf.find(first, at + 1)
    return len(buf)


OOM_FILES = (
    "/sys/fs/cgroup/memory/{dir}/memory.oom_control",  # v1
    "/sys/fs/cgroup/{dir}/memory.events",  # v2
)


def cgroup_dirs(container: str, parent: str | None = None) -> list[str]:
    """Where the engine puts a container's cgroup, below a hierarchy's root: under its
    ``cgroup_parent`` (cgroupfs: a path; systemd: a slice, ``a-b.slice`` nested in
    ``a.slice``), else the engine's default for either driver."""
    if parent is None:
        return [f"docker/{container}", f"system.slice/docker-{container}.scope"]
    if parent.endswith(".slice"):
        parts = parent.removesuffix(".slice").split("-")
        slices = "/".join("-".join(parts[: i + 1]) + ".slice" for i in range(len(parts)))
        return [f"{slices}/docker-{container}.scope"]
    return [f"{parent.strip('/')}/{container}"]


def oom_kills(container: str, cgroup_parent: str | None = None) -> int | None:
    """How many processes the kernel OOM-killed in the container's cgroup (None: unknown)."""
    for template in OOM_FILES:
        for cgroup_dir in cgroup_dirs(container, cgroup_parent):
            try:  # read on every warm call (twice): a few µs, no pathlib
                fd = os.open(template.format(dir=cgroup_dir), os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                text = os.read(fd, 4096)
            except OSError:
                continue
            finally:
                os.close(fd)
            for line in text.splitlines():
                key, _, value = line.partition(b" ")
                if key == b"oom_kill" and value.strip().isdigit():
                    return int(value)
    return None
