"""The program a kernel's container runs: an IPython shell and its runner, on stdio.

Never imported by the supervisor: its text is the container's ``python3 -I -c`` program
(``runner_argv``). It runs IPython's ``InteractiveShell`` (what a Jupyter kernel runs) in
this very process: an execute is a function call, not messages to another process over
ZMQ. JSON lines with the supervisor over the container's attached stdin/stdout:

    in:  {"op": "exec", "id", "code"} | {"op": "interrupt"} | {"op": "save"}
         | {"op": "restore"}
    out: {"ev": "ready"} | {"ev": "stream", "id", "name", "text"}
         | {"ev": "result", "id", "data", "main"}
         | {"ev": "done", "id", "status", "error", "execution_count"}
         | {"ev": "saved", "saved", "lost", "error"} | {"ev": "restored", "restored", "lost"}

The protocol has private copies of stdin/stdout; the code's fd 0 is /dev/null (``input()``
raises, as in a kernel without stdin), its fds 1 and 2 pipes read back as ``stream`` events
(``print``, child processes, C libraries). An interrupt is SIGINT to the main thread while
code runs. The kernel dying is this process dying: the supervisor sees the output end. When
stdin ends (the server's attach went: killed) the names are saved as for ``save`` before
the runner exits. Saving and restoring use ``dill`` name by name (what cannot be pickled is
``lost``): saved state is tenant data, only ever unpickled here, in the kernel's sandbox.
"""

from __future__ import annotations

import base64
import builtins
import codecs
import contextlib
import getpass
import io
import json
import os
import queue
import re
import select
import signal
import sys
import threading
import time
from typing import Any

STATE_DIR = "/run/navi/kernel"
KEEP_MIMES = ("text/plain", "image/png", "text/html")
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
VALUE_MAX = 16384
TRACEBACK_MAX = 200
READ_SIZE = 65536
FLUSH_S = 0.1  # a stream's text waits at most this long before it is sent
HELD_MAX = 1 << 20  # results held for the next write, at most (bytes)
HIDDEN = {"In", "Out", "exit", "quit", "get_ipython"}


def error_of(name: str, value: object, traceback: list[str]) -> dict[str, Any]:
    return {"name": name[:200], "value": str(value)[:VALUE_MAX],
            "traceback": [ANSI.sub("", t)[:VALUE_MAX] for t in traceback[-TRACEBACK_MAX:]]}


def mime_bundle(data: dict[str, Any]) -> dict[str, str]:
    """The parts of a display the supervisor passes on (PNG as base64, as Jupyter has it)."""
    if isinstance(data.get("image/png"), bytes):
        data = {**data, "image/png": base64.b64encode(data["image/png"]).decode()}
    kept = {m: data[m] for m in KEEP_MIMES if isinstance(data.get(m), str)}
    kept.setdefault("text/plain", "")
    return kept


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class Channel:
    """JSON lines to the supervisor on a private copy of the container's stdout. A result
    waits for the next line and goes out in the same write (an execute's value and its
    ``done``: one trip through the engine's attach, not two)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.lock = threading.Lock()
        self.held: list[bytes] = []
        self.held_bytes = 0

    def send(self, event: dict[str, Any], hold: bool = False) -> None:
        line = json.dumps(event, separators=(",", ":")).encode() + b"\n"
        with self.lock:
            self.held.append(line)
            self.held_bytes += len(line)
            if hold and self.held_bytes < HELD_MAX:
                return
            data = b"".join(self.held)
            self.held.clear()
            self.held_bytes = 0
            # an interrupt must not cut a line: SIGINT waits until it is written
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
            try:
                write_all(self.fd, data)
            finally:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


class Capture:
    """What the code writes to fd 1 or 2, read from a pipe by a thread of its own and sent
    as ``stream`` events of ``job`` (the execute in progress; dropped between executes)."""

    def __init__(self, fd: int, name: str, channel: Channel) -> None:
        read, write = os.pipe()
        os.dup2(write, fd)
        os.close(write)
        os.set_blocking(read, False)
        self.read_fd, self.name, self.channel = read, name, channel
        self.lock = threading.RLock()
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.job: str | None = None
        threading.Thread(target=self._follow, daemon=True, name=f"capture-{name}").start()

    def _follow(self) -> None:
        while True:
            select.select([self.read_fd], [], [])
            if not self.drain():
                return  # every write end is closed

    def drain(self) -> bool:
        """Send what the pipe holds now; False at its end."""
        with self.lock:
            while True:
                try:
                    chunk = os.read(self.read_fd, READ_SIZE)
                except BlockingIOError:
                    return True
                if not chunk:
                    return False
                text = self.decoder.decode(chunk)
                if text and self.job is not None:
                    self.channel.send({"ev": "stream", "id": self.job, "name": self.name,
                                       "text": text})
                if len(chunk) < READ_SIZE:
                    return True

    def finish(self) -> None:
        """The execute ended: what it wrote goes out now, later writes are nobody's."""
        with self.lock:
            self.drain()
            self.job = None


class OutStream(io.TextIOBase):
    """``sys.stdout``/``sys.stderr`` of the code: text kept here, written to its fd (the
    captured pipe) when the execute ends or ``FLUSH_S`` after it was written, as ipykernel's
    stream does (a loop of prints is a few events, not one per print)."""

    encoding = "utf-8"

    def __init__(self, fd: int, pending: threading.Event) -> None:
        super().__init__()
        self.fd, self.pending = fd, pending
        self.lock = threading.Lock()
        self.parts: list[str] = []
        self.forked = False  # in a child process (multiprocessing)

    def fileno(self) -> int:
        return self.fd

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        with self.lock:
            if not self.parts and not self.forked:
                self.pending.set()
            self.parts.append(text)
        if self.forked and "\n" in text:  # no flushing thread there: line by line
            self.flush()
        return len(text)

    def flush(self) -> None:
        with self.lock:  # held while writing: two flushes keep their order
            text, self.parts = "".join(self.parts), []
            if text:
                write_all(self.fd, text.encode("utf-8", "replace"))


def _no_input(*_: object, **__: object) -> str:
    from IPython.core.error import StdinNotImplementedError

    raise StdinNotImplementedError(  # ipykernel's words
        "raw_input was called, but this frontend does not support input requests.")


class Kernel:
    def __init__(self) -> None:
        os.makedirs(STATE_DIR, exist_ok=True)
        self.state = os.path.join(STATE_DIR, "state.pkl")
        self.meta_path = os.path.join(STATE_DIR, "meta.json")
        self.requests = os.fdopen(os.dup(0), "rb")
        self.channel = Channel(os.dup(1))
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        self.captures = [Capture(1, "stdout", self.channel), Capture(2, "stderr", self.channel)]
        sys.stdin = open(os.devnull, encoding="utf-8")  # noqa: SIM115 (lives as long as we do)
        self.pending = threading.Event()
        self.streams = [OutStream(1, self.pending), OutStream(2, self.pending)]
        sys.stdout, sys.stderr = self.streams
        os.environ.update({"MPLBACKEND": "module://matplotlib_inline.backend_inline",
                           "JUPYTER_PLATFORM_DIRS": "1"})
        sys.dont_write_bytecode = bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))
        from IPython.core.interactiveshell import InteractiveShell
        from traitlets.config import Config

        config = Config()
        config.HistoryManager.enabled = False
        config.InteractiveShell.colors = "NoColor"
        config.DisplayFormatter.active_types = list(KEEP_MIMES)  # the rest is never sent
        self.shell = InteractiveShell.instance(config=config)
        hook = self.shell.displayhook
        hook.write_output_prompt = lambda: None
        hook.write_format_data = lambda data, md=None: self._result(data, True)
        hook.finish_displayhook = lambda: None
        publisher = self.shell.display_pub
        publisher.publish = lambda data, *_, **__: self._result(data, False)
        publisher.clear_output = lambda *_, **__: None
        self.shell._showtraceback = self._traceback
        self.shell.enable_gui = lambda gui=None: None  # `%matplotlib inline`: no GUI loop
        builtins.input = getpass.getpass = _no_input
        sys.path.insert(0, "")  # the code imports from its working directory, as in Jupyter
        sys.path[1:1] = [p for p in os.environ.get("PYTHONPATH", "").split(":") if p]
        self.job: str | None = None
        self.error: dict[str, Any] | None = None
        self.busy = False
        self.main = threading.main_thread().ident or 0
        self.jobs: queue.Queue[dict[str, Any]] = queue.Queue()
        signal.signal(signal.SIGINT, self._on_interrupt)
        os.register_at_fork(after_in_child=self._forked)

    def _forked(self) -> None:
        """A child of the code's (multiprocessing): its prints go to the captured fds."""
        for stream in self.streams:
            stream.lock, stream.parts, stream.forked = threading.Lock(), [], True

    def _result(self, data: dict[str, Any], main: bool) -> None:
        if self.job is not None:
            self.channel.send({"ev": "result", "id": self.job, "data": mime_bundle(data),
                               "main": main}, hold=True)

    def _traceback(self, etype: type, evalue: object, stb: list[str]) -> None:
        self.error = error_of(etype.__name__, evalue, list(stb))

    def _on_interrupt(self, signum: int, frame: object) -> None:
        if self.busy:
            raise KeyboardInterrupt

    def read_requests(self) -> None:
        for raw in self.requests:
            try:
                job = dict(json.loads(raw))
            except (ValueError, TypeError):
                continue
            if job.get("op") != "interrupt":
                self.jobs.put(job)
            elif self.busy:
                signal.pthread_kill(self.main, signal.SIGINT)
        self.jobs.put({"op": "quit"})

    def execute(self, code: str, job_id: str) -> dict[str, Any]:
        self.error, self.job = None, job_id
        for capture in self.captures:
            capture.job = job_id
        count = self.shell.execution_count
        failure: BaseException | None = None
        try:
            self.busy = True
            result = self.shell.run_cell(code, store_history=True)
            failure = result.error_before_exec or result.error_in_exec
        except KeyboardInterrupt as exc:  # landed outside the code (its display, say)
            failure = exc
            self.shell.execution_count = max(self.shell.execution_count, count + 1)
        finally:
            self.busy = False
        for out in (*self.streams, sys.__stdout__, sys.__stderr__):
            with contextlib.suppress(OSError, ValueError, AttributeError):
                out.flush()  # type: ignore[union-attr]  # what the code wrote, before done
        for capture in self.captures:
            capture.finish()
        self.job = None
        if failure is not None and self.error is None:
            self.error = error_of(type(failure).__name__, failure, [])
        return {"status": "error" if self.error else "ok", "error": self.error,
                "execution_count": count}

    def save(self) -> dict[str, Any]:
        """Every picklable name of the namespace into ``state.pkl``; the others are lost."""
        import dill

        hidden = set(self.shell.user_ns_hidden) | HIDDEN
        names: dict[str, bytes] = {}
        lost: list[str] = []
        for key, value in list(self.shell.user_ns.items()):
            if key.startswith("_") or key in hidden:
                continue
            try:
                names[key] = dill.dumps(value)
            except Exception:
                lost.append(key)
        tmp = self.state + ".part"
        with open(tmp, "wb") as f:
            dill.dump({"v": 1, "names": names}, f)
        os.replace(tmp, self.state)
        info = {"saved": sorted(names), "lost": sorted(lost)}
        with open(self.meta_path, "w") as f:
            json.dump(info, f)
        return info

    def restore(self) -> dict[str, Any]:
        """The saved names back into the namespace (unpickled here, in the sandbox)."""
        import dill

        meta = _read_json(self.meta_path)
        restored, lost = [], list(meta.get("lost", []))
        try:
            with open(self.state, "rb") as f:
                saved = dill.load(f)
            for key, raw in saved.get("names", {}).items():
                try:
                    self.shell.user_ns[key] = dill.loads(raw)
                    restored.append(key)
                except (Exception, SystemExit):
                    lost.append(key)
        except (Exception, SystemExit):  # nothing could be read: all of it is lost
            restored, lost = [], lost + list(meta.get("saved", []))
        info = {"restored": sorted(restored), "lost": sorted(set(lost))}
        with open(self.meta_path, "w") as f:
            json.dump(info, f)
        with contextlib.suppress(OSError):
            os.unlink(self.state)
        return info

    def flush_streams(self) -> None:
        while True:
            self.pending.wait()
            time.sleep(FLUSH_S)
            self.pending.clear()
            for stream in self.streams:
                stream.flush()

    def serve(self) -> None:
        threading.Thread(target=self.read_requests, daemon=True, name="requests").start()
        threading.Thread(target=self.flush_streams, daemon=True, name="flush").start()
        self.channel.send({"ev": "ready"})
        while True:
            job = self.jobs.get()
            op = job.get("op")
            if op == "quit":  # stdin ended: the server's attach went (killed); keep the names
                self.save()
                return
            if op == "exec":
                job_id = str(job.get("id", ""))
                done = self.execute(str(job.get("code", "")), job_id)
                self.channel.send({"ev": "done", "id": job_id, **done})
            elif op == "save":
                try:
                    info, error = self.save(), None
                except Exception as exc:
                    info, error = {}, error_of(type(exc).__name__, exc, [])
                self.channel.send({"ev": "saved", "saved": info.get("saved", []),
                                   "lost": info.get("lost", []), "error": error})
            elif op == "restore":
                info = self.restore() if os.path.exists(self.state) else {}
                self.channel.send({"ev": "restored", "restored": info.get("restored", []),
                                   "lost": info.get("lost", [])})


def _read_json(path: str) -> dict[str, Any]:
    try:
        with open(path) as f:
            value = json.load(f)
        return value if isinstance(value, dict) else {}
    except (OSError, ValueError):
        return {}


def main() -> None:
    diagnostics = os.dup(2)  # fd 2 becomes the code's: the runner's own words go here
    try:
        kernel = Kernel()
    except Exception as exc:
        os.write(diagnostics, f"the kernel did not start: {exc}\n".encode())
        os._exit(2)
    try:
        kernel.serve()
    except Exception as exc:
        os.write(diagnostics, f"the runner failed: {exc!r}\n".encode())
        os._exit(3)
    os._exit(0)  # nothing else to run: the container ends


if __name__ == "__main__":
    main()
