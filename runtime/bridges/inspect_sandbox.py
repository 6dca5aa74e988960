"""inspect_ai's sandbox type `navi`: every sample's commands run in Navi, per call, audited.

Installing navi-runtime registers it (entry point `inspect_ai: navi`), so an eval says
`--sandbox navi` (or `sandbox=("navi", "navi.yaml")`). Configuration: `NAVI_URL` and
`NAVI_TOKEN` (a user token), or a YAML file with `url`, `token` (or `token_env`), `profile`.

One Navi session per sample (opened at `sample_init`, deleted at `sample_cleanup`). `exec`
is one `terminal` call through `POST /v1/sessions/{id}/exec`: decided by the server's
policy, written to its audit log, run in a fresh sandbox with the session's files as the
working directory. Files go through the files API, workspace files and the session's
persistent /tmp alike (it acts as the sandbox uid: a file the sandbox made unreadable or
read-only is a `PermissionError`). Every request is `runtime.client`'s (`AsyncNaviClient`);
its exceptions become the ones inspect expects. What a per-call, non-root sandbox does not
offer raises what inspect expects (README, "inspect_ai"): another user
(`SandboxUserUnsupportedError`), writes outside /workspace and /tmp (`PermissionError`:
nothing else survives a call).
"""

from __future__ import annotations

import base64
import contextlib
import os
import posixpath
import re
import secrets
import shlex
from pathlib import Path
from typing import Literal, overload

import yaml
from inspect_ai.util import (
    ExecResult,
    OutputLimitExceededError,
    SandboxEnvironment,
    SandboxEnvironmentConfigType,
    SandboxEnvironmentLimits,
    SandboxUserUnsupportedError,
    sandboxenv,
)
from pydantic import BaseModel, ConfigDict, Field

from runtime.client import (
    AsyncNaviClient,
    AuthenticationError,
    BadRequestError,
    NaviAPIError,
    NotFoundError,
    PermissionDeniedError,
    ResponseTooLarge,
)

WORKSPACE = "/workspace"
TMP = "/tmp"
SCRATCH = ".inspect-navi-"  # names of the provider's own short-lived workspace files
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
INLINE_SCRIPT_BYTES = 60 * 1024  # terminal's command limit is 64 KiB; larger go by file
HTTP_TIMEOUT_S = 600.0


class NaviSandboxConfig(BaseModel):
    """The `navi` sandbox's configuration (a YAML file, or the environment)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str = Field(description="the Navi server, e.g. http://127.0.0.1:8000")
    token: str | None = Field(None, description="a user token (prefer token_env)")
    token_env: str = Field("NAVI_TOKEN", description="environment variable with the token")
    profile: str | None = Field(None, description="session profile (default: the tenant's)")

    def bearer(self) -> str:
        token = self.token or os.environ.get(self.token_env, "")
        if not token:
            raise RuntimeError(f"navi sandbox: no token (set {self.token_env} or `token`)")
        return token


def load_config(config: SandboxEnvironmentConfigType | None) -> NaviSandboxConfig:
    if isinstance(config, NaviSandboxConfig):
        return config
    if isinstance(config, str):
        data = yaml.safe_load(Path(config).read_text(encoding="utf-8")) or {}
        return NaviSandboxConfig(**data)
    if isinstance(config, BaseModel):
        return NaviSandboxConfig(**config.model_dump())
    url = os.environ.get("NAVI_URL", "")
    if not url:
        raise RuntimeError("navi sandbox: set NAVI_URL (and NAVI_TOKEN) or pass a config file")
    return NaviSandboxConfig(url=url)


def workspace_path(file: str) -> str | None:
    """The files API's name for `file`: workspace-relative, `/tmp/...` for the session's
    /tmp, or None when it lies outside both."""
    path = posixpath.normpath(file if file.startswith("/") else f"{WORKSPACE}/{file}")
    if path.startswith(f"{TMP}/"):
        return path
    if path == WORKSPACE or not path.startswith(f"{WORKSPACE}/"):
        return None
    return path[len(WORKSPACE) + 1:]


def outside(file: str) -> PermissionError:
    return PermissionError(
        f"{file}: outside the session's {WORKSPACE} and {TMP}; a Navi sandbox lives for "
        "one call, so only those persist and only they can be written")


@sandboxenv(name="navi")
class NaviSandboxEnvironment(SandboxEnvironment):
    def __init__(self, client: AsyncNaviClient, session: str) -> None:
        super().__init__()
        self.client = client
        self.session = session

    # ---- lifecycle ------------------------------------------------------------------

    @classmethod
    def config_deserialize(cls, config: dict[str, object]) -> BaseModel:
        return NaviSandboxConfig(**config)

    @classmethod
    async def sample_init(cls, task_name: str, config: SandboxEnvironmentConfigType | None,
                          metadata: dict[str, str]) -> dict[str, SandboxEnvironment]:
        settings = load_config(config)
        client = AsyncNaviClient(settings.url, settings.bearer(), timeout=HTTP_TIMEOUT_S)
        try:
            session = await client.create_session(profile=settings.profile or None,
                                                  title=f"inspect: {task_name}"[:200])
        except NaviAPIError as exc:
            await client.aclose()
            raise RuntimeError(f"navi sandbox: cannot open a session: {exc}") from None
        return {"default": cls(client, session.id)}

    @classmethod
    async def sample_cleanup(cls, task_name: str, config: SandboxEnvironmentConfigType | None,
                             environments: dict[str, SandboxEnvironment],
                             interrupted: bool) -> None:
        for env in environments.values():
            if isinstance(env, NaviSandboxEnvironment):
                try:
                    with contextlib.suppress(NaviAPIError):  # e.g. already gone
                        await env.client.delete_session(env.session)
                finally:
                    await env.client.aclose()

    # ---- exec -----------------------------------------------------------------------

    async def exec(self, cmd: list[str], input: str | bytes | None = None,
                   cwd: str | None = None, env: dict[str, str] | None = None,
                   user: str | None = None, timeout: int | None = None,
                   timeout_retry: bool = True, concurrency: bool = True) -> ExecResult[str]:
        if user is not None and user != "root":
            raise SandboxUserUnsupportedError(
                f"navi sandboxes run every call as the tenant's own unprivileged uid (or "
                f"root, where the policy allows it); running as {user!r} is not supported")
        scratch: list[str] = []
        try:
            lines = []
            if input is not None:
                name = await self._scratch(input.encode() if isinstance(input, str) else input)
                scratch.append(name)
                lines.append(f"exec 0< {shlex.quote(f'{WORKSPACE}/{name}')}")
            else:
                lines.append("exec 0</dev/null")
            for key, value in (env or {}).items():
                if not ENV_NAME.fullmatch(key):  # `$` would let "A\n" through
                    raise ValueError(f"not an environment variable name: {key!r}")
                lines.append(f"export {key}={shlex.quote(value)}")
            if cwd:
                lines.append(f"cd -- {shlex.quote(cwd)} || exit 1")
            lines.append(shlex.join(cmd))
            script = "\n".join(lines)
            if len(script.encode()) > INLINE_SCRIPT_BYTES:
                name = await self._scratch(script.encode())
                scratch.append(name)
                script = f"exec bash --noprofile --norc {shlex.quote(f'{WORKSPACE}/{name}')}"
            return await self._run(script, timeout, root=user == "root")
        finally:
            for name in scratch:
                with contextlib.suppress(NaviAPIError):
                    await self.client.delete_file(self.session, name)

    async def _run(self, script: str, timeout: int | None, *, root: bool = False
                   ) -> ExecResult[str]:
        args = {"command": script, **({"user": "root"} if root else {})}
        try:
            out = await self.client.exec(self.session, "terminal", args, timeout_s=timeout)
        except PermissionDeniedError as exc:
            if root:  # root only where the policy runs the call under gVisor, allow_root
                raise SandboxUserUnsupportedError(f"running as root: {exc}") from None
            raise PermissionError(f"denied by Navi's policy: {exc}") from None
        except NaviAPIError as exc:
            raise RuntimeError(f"navi exec failed: {exc}") from None
        if out.timed_out:
            raise TimeoutError(f"command timed out after {timeout} s")
        stdout, stderr, code = out.stdout, out.stderr, out.exit_code
        if code == 126 and "Permission denied" in stderr:
            raise PermissionError(stderr.strip())
        limit = SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE
        if out.truncated or len(stdout) > limit or len(stderr) > limit:
            raise OutputLimitExceededError(
                SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE_STR, stdout[:limit])
        return ExecResult(success=code == 0, returncode=code if code is not None else -1,
                          stdout=stdout, stderr=stderr)

    async def _scratch(self, data: bytes) -> str:
        name = f"{SCRATCH}{secrets.token_hex(8)}"
        try:
            await self.client.put_file(self.session, name, data)
        except NaviAPIError as exc:
            raise RuntimeError(f"navi sandbox: cannot stage data: {exc}") from None
        return name

    # ---- files ----------------------------------------------------------------------

    async def write_file(self, file: str, contents: str | bytes) -> None:
        rel = workspace_path(file)
        if rel is None:
            raise outside(file)
        try:
            await self.client.put_file(self.session, rel, contents)
        except NaviAPIError as exc:
            if "is a directory" in exc.message.lower():
                raise IsADirectoryError(f"{file}: is a directory") from None
            if isinstance(exc, AuthenticationError | PermissionDeniedError):
                raise PermissionError(f"{file}: {exc}") from None
            raise RuntimeError(f"navi sandbox: cannot write {file}: {exc}") from None

    @overload
    async def read_file(self, file: str, text: Literal[True] = True) -> str: ...

    @overload
    async def read_file(self, file: str, text: Literal[False]) -> bytes: ...

    async def read_file(self, file: str, text: bool = True) -> str | bytes:
        rel = workspace_path(file)
        if rel is None:
            data = await self._read_outside(file)
        else:
            data = await self._read_workspace(file, rel)
        return data.decode("utf-8") if text else data

    async def _read_workspace(self, file: str, rel: str) -> bytes:
        try:
            return await self.client.get_file(
                self.session, rel, max_bytes=SandboxEnvironmentLimits.MAX_READ_FILE_SIZE)
        except ResponseTooLarge:
            raise OutputLimitExceededError(
                SandboxEnvironmentLimits.MAX_READ_FILE_SIZE_STR, None) from None
        except NaviAPIError as exc:
            if "is a directory" in exc.message.lower():
                raise IsADirectoryError(f"{file}: is a directory") from None
            if isinstance(exc, BadRequestError | NotFoundError):  # no such file, or name
                raise FileNotFoundError(f"{file}: no such file") from None
            raise PermissionError(f"{file}: {exc}") from None

    async def _read_outside(self, file: str) -> bytes:
        """A file of the image (e.g. /etc/os-release), read in a sandbox."""
        quoted = shlex.quote(file)
        result = await self._run(
            f"if [ -d {quoted} ]; then echo 'is a directory' >&2; exit 21; fi\n"
            f"base64 -w0 -- {quoted}", None)
        if result.returncode == 21:
            raise IsADirectoryError(f"{file}: is a directory")
        if not result.success:
            if "No such file" in result.stderr:
                raise FileNotFoundError(f"{file}: no such file")
            raise PermissionError(f"{file}: {result.stderr.strip()}")
        data = base64.b64decode(result.stdout)
        if len(data) > SandboxEnvironmentLimits.MAX_READ_FILE_SIZE:
            raise OutputLimitExceededError(SandboxEnvironmentLimits.MAX_READ_FILE_SIZE_STR, None)
        return data

