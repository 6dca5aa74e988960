"""Who the embedded model's build and server run as, and what they can reach.

llama-cpp-python is built from source on first use and its server parses prompts that carry
untrusted tool output: neither runs as the supervisor. When the supervisor is root, both run
as a uid:gid of their own (`NAVI_EMBEDDED_UID`, default `sandbox_uid_base - 1`: below every
tenant's sandbox uid; refused if a host account has it), with no supplementary groups, no
new privileges, in a session of their own, umask 077, a scrubbed environment whose HOME and
TMPDIR are theirs, and rlimits. All of it is set by util-linux's `prlimit` and `setpriv` in
front of the program (argv, not spawn options: uvloop, which `navi serve` runs on, has no
`user=`/`umask=` for subprocesses, and a `preexec_fn` is unsafe with threads). Their files
live in `<dir>/model` (owned by that uid); the supervisor's own (stamp, logs) stay in
`<dir>`, which is root's, so the model's uid cannot plant a symlink the supervisor would
write through. That uid reads what any unprivileged user can: not `keys/` (0700) nor
`admin-token` (0600).

A supervisor that is not root cannot switch uid: the model then runs as the supervisor's own
user (`ModelUser.confined` is False; logged, and `navi doctor` says so).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime.errors import LLMUnavailable
from runtime.hostusers import host_has_uid

# What the scrubbed environment keeps of ours (never NAVI_ADMIN_TOKEN, NAVI_OPENAI_API_KEY or
# any other secret of the supervisor's). HOME and TMPDIR are set to the model's own.
CHILD_ENV = ("PATH", "LANG", "LC_ALL", "CC", "CXX", "CMAKE_ARGS",
             "CMAKE_BUILD_PARALLEL_LEVEL", "MAKEFLAGS", "SSL_CERT_FILE", "SSL_CERT_DIR",
             "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy",
             "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX",
             "PIP_CONFIG_FILE", "PIP_CERT")
# rlimits of the build and the server (prlimit(1) sets them, then execs the program). The
# build's compilers need a few GiB of address space each; the server maps a 250 MB model.
RLIMITS = {"nofile": 4096, "core": 0, "fsize": 8 << 30, "as": 16 << 30}
SYSTEM_CACHE = Path("/var/cache/navi/embedded")
NPROC = 512  # per uid: only meaningful (and only set) when the uid is the model's own


@dataclass(frozen=True)
class ModelUser:
    uid: int
    gid: int
    confined: bool  # True: a uid of its own; False: the supervisor's (it is not root)
    note: str


def model_user(embedded_uid: int | None, uid_base: int, passwd: Path | None) -> ModelUser:
    """The uid the model runs as: its own when we are root, else ours."""
    if os.geteuid() != 0:
        uid = os.getuid()
        return ModelUser(uid, os.getgid(), False,
                         f"the supervisor is not root and cannot switch uid: the embedded model "
                         f"runs as the supervisor's own uid {uid}")
    uid = embedded_uid if embedded_uid is not None else uid_base - 1
    if host_has_uid(uid, passwd):
        raise LLMUnavailable(f"uid {uid} (for the embedded model) belongs to a host account: "
                             "set NAVI_EMBEDDED_UID to a uid no account has")
    return ModelUser(uid, uid, True, f"uid:gid {uid}:{uid}, no groups, its own session")


def child_env(user: ModelUser, home: Path) -> dict[str, str]:
    """The scrubbed environment of the build and the model server."""
    env = {k: v for k, v in os.environ.items() if k in CHILD_ENV}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    return {**env, "HOME": str(home), "TMPDIR": str(home / "tmp"),
            "PIP_CACHE_DIR": str(home / "pip-cache"), "PYTHONNOUSERSITE": "1"}


def _tool(name: str) -> str:
    found = shutil.which(name, path="/usr/bin:/bin:/usr/sbin:/sbin")
    if found is None:
        raise LLMUnavailable(f"the embedded model needs {name} (util-linux) to confine it")
    return found


def launch(user: ModelUser, argv: list[str]) -> tuple[list[str], dict[str, Any]]:
    """``argv`` behind its rlimits, the switch to ``user`` and umask 077; and the spawn
    options (a session of its own)."""
    limits = [f"--{name}={value}:{value}" for name, value in RLIMITS.items()]
    switch: list[str] = []
    if user.confined:
        limits.append(f"--nproc={NPROC}:{NPROC}")
        switch = [_tool("setpriv"), f"--reuid={user.uid}", f"--regid={user.gid}",
                  "--clear-groups", "--no-new-privs", "--"]
    umask = ["/bin/sh", "-c", 'umask 077 && exec "$0" "$@"']
    return ([_tool("prlimit"), *limits, "--", *switch, *umask, *argv],
            {"start_new_session": True})


def _blocker(path: Path, user: ModelUser) -> Path | None:
    """The first of ``path``'s parents the model's uid may not traverse (None: none)."""
    if not user.confined:
        return None
    for parent in reversed(path.parents):
        try:
            st = parent.stat()
        except FileNotFoundError:
            return None  # made later, by us (mode by our umask)
        bit = (stat.S_IXUSR if st.st_uid == user.uid else
               stat.S_IXGRP if st.st_gid == user.gid else stat.S_IXOTH)
        if not st.st_mode & bit:
            return parent
    return None


def reachable(path: Path, user: ModelUser) -> None:
    """Refuse (clearly) a directory the model's uid cannot get to through its parents."""
    parent = _blocker(path, user)
    if parent is not None:
        raise LLMUnavailable(
            f"the embedded model's directory {path} is out of reach of its uid {user.uid}: "
            f"{parent} is mode {stat.S_IMODE(parent.stat().st_mode):04o}; set "
            "NAVI_EMBEDDED_DIR to a directory under ones others may traverse")


def default_directory(data_dir: Path, embedded_uid: int | None, uid_base: int) -> Path:
    """Where the model is installed when NAVI_EMBEDDED_DIR is not set: ``<data>/embedded``,
    unless the model's uid could not get there (a checkout under root's 0700 home, where
    `make run` keeps its data dir): then the system's cache, ``/var/cache/navi/embedded``."""
    preferred = (data_dir / "embedded").resolve()
    if os.geteuid() != 0:
        return preferred
    uid = embedded_uid if embedded_uid is not None else uid_base - 1
    if _blocker(preferred, ModelUser(uid, uid, True, "")) is None:
        return preferred
    return SYSTEM_CACHE


def base_python(user: ModelUser) -> str:
    """A python3 the model's uid can run, to make its venv from: ours unless it lives where
    that uid cannot reach (a pyenv under /root), else the system's."""
    ours = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    for candidate in (ours, shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")):
        if candidate and _blocker(Path(candidate), user) is None and (
                not user.confined or os.stat(candidate).st_mode & stat.S_IXOTH):
            return candidate
    raise LLMUnavailable(f"no python3 that uid {user.uid} can run (ours is {ours}): install "
                         "the system's python3 and python3-venv")


def prepare(directory: Path, user: ModelUser, *, fresh: bool) -> Path:
    """``directory`` (ours) and ``directory/model`` (the model uid's, 0700) made; with
    ``fresh``, a model dir not the uid's (an older install, built as root) is replaced.
    Returns the model dir."""
    directory.mkdir(parents=True, exist_ok=True)
    reachable(directory, user)
    if user.confined:
        os.chown(directory, 0, 0)
        os.chmod(directory, 0o755)
    model = directory / "model"
    if fresh and model.is_dir() and model.lstat().st_uid != user.uid:
        shutil.rmtree(model)  # root's own files, not the model uid's: safe to remove
    if not model.is_dir():
        os.mkdir(model, 0o700)
        for sub in ("home", "home/tmp"):
            os.mkdir(model / sub, 0o700)
        if user.confined:
            for path in (model, model / "home", model / "home" / "tmp"):
                os.chown(path, user.uid, user.gid)
    return model


def kill_session(sid: int) -> int:
    """SIGKILL every process of session ``sid`` (a build's: ninja puts each compiler in a
    process group of its own, but none leaves the session); how many were signalled."""
    killed = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat_line = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        fields = stat_line[stat_line.rindex(")") + 2:].split()  # after "pid (comm) "
        if len(fields) > 3 and int(fields[3]) == sid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry.name), signal.SIGKILL)
                killed += 1
    return killed
