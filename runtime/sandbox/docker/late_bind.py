"""Session files bound into a container after it started: a warm pool per tenant.

A warm container of the session pool (``warm_pool.py``) is launched with one session's
workspace and /tmp already bound, so a session's first call always runs cold. A *pooled*
container is launched with the tenant's class (uid, limits, runtime, image, workdir) and two
empty directories of its own on the host instead, bound at the workdir (/workspace) and /tmp
with ``rslave`` propagation:

    <data dir>/bind/<pid>-<hex>/            a shared mount (bind of itself, made shared)
        <slot>/workspace  -> /workspace     one slot per container, never reused
        <slot>/tmp        -> /tmp

When a call takes it, the call's workspace and tmp directory are bind-mounted onto the slot's
two directories on the host (``attach``); the mounts propagate into the container, on top of
its binds, so the container sees exactly that session's files at the paths the tools use.
The runner re-enters its workdir by path once its job arrives (``warm_runner.py``: the cwd it
started with is the empty directory under the new mount).

Rules that keep sessions apart:
- a slot is made for one container and removed with it; a taken container serves one call
  and is removed, never returned to the pool: no container sees two sessions' files;
- a container binds its own slot's directories, not the bind root: a mount made on another
  slot does not fall inside any of its mounts, so it never reaches it;
- the session's binds inherit its disk's ``nosuid,nodev`` (a bind copies its source mount's
  flags; the workspaces root is hardened the same way): ``attach`` checks them and refuses
  (the call runs cold) when they are missing.

Root only (``mount(2)``), runc only: gVisor's gofer serves the files it was given at start,
a mount made later on the host does not reach a runsc sandbox, so gVisor keeps the session
pool. A guard process (``runtime.workspace.mount_guard``) detaches what is bound under the
bind root when the supervisor dies, ``kill -9`` included; the next start's ``sweep`` removes
the empty directories of bind roots whose supervisor is gone (their containers are the
reaper's).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
from dataclasses import dataclass
from pathlib import Path

from runtime.errors import SandboxError
from runtime.logging import get_logger
from runtime.sandbox.docker.spec import LABEL_SESSION, TMP_TARGET, BindMount, ContainerSpec
from runtime.workspace.mount_guard import MountGuard

log = get_logger(__name__)

MS_BIND = 0x1000
MS_REC = 0x4000
MS_SHARED = 1 << 20
MNT_DETACH = 2
PLACEHOLDER = "/late-bound"
"""The source of a pooled spec's session binds until a slot is made for a container."""

_libc = ctypes.CDLL(None, use_errno=True)


def _mount(source: str, target: str, flags: int) -> None:
    if _libc.mount(source.encode(), target.encode(), None, flags, None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source} on {target}: {os.strerror(err)}")


def _detach(target: str) -> bool:
    """Detach the top mount on ``target``; False when none is left (``os.path.ismount``
    cannot tell a bind of the same filesystem)."""
    if _libc.umount2(target.encode(), MNT_DETACH) != 0:
        err = ctypes.get_errno()
        if err in (errno.EINVAL, errno.ENOENT):  # not a mount point (any more)
            return False
        raise OSError(err, f"umount {target}: {os.strerror(err)}")
    return True


@dataclass(frozen=True)
class Slot:
    """One pooled container's two host directories."""

    path: Path

    @property
    def workspace(self) -> Path:
        return self.path / "workspace"

    @property
    def tmp(self) -> Path:
        return self.path / "tmp"


class BindRoot:
    """The shared mount the slots live in (one per backend while it is started)."""

    def __init__(self, data_dir: Path) -> None:
        self.parent = data_dir / "bind"
        self.path = self.parent / f"{os.getpid()}-{os.urandom(4).hex()}"
        self.opened = False
        self._guard: MountGuard | None = None

    @staticmethod
    def possible() -> bool:
        return os.geteuid() == 0

    def open(self) -> None:
        self.sweep()
        self.path.mkdir(mode=0o711, parents=True)
        _mount(str(self.path), str(self.path), MS_BIND)
        _mount("none", str(self.path), MS_SHARED)
        self._guard = MountGuard.start(self.path)
        self.opened = True

    def slot(self) -> Slot:
        if not self.opened:
            raise SandboxError("the bind root is not open")
        slot = Slot(self.path / os.urandom(8).hex())
        slot.path.mkdir(mode=0o711)
        slot.workspace.mkdir(mode=0o755)
        slot.tmp.mkdir(mode=0o755)
        return slot

    @staticmethod
    def attach(slot: Slot, workspace: Path, tmp: Path | None) -> None:
        """Bind the session's directories onto the slot (they propagate into the container);
        ``SandboxError`` (nothing left bound) if a bind fails or lacks nosuid,nodev."""
        pairs = [(workspace, slot.workspace)] + ([(tmp, slot.tmp)] if tmp is not None else [])
        try:
            for source, target in pairs:
                _mount(str(source), str(target), MS_BIND)
                flags = os.statvfs(target).f_flag
                if not (flags & os.ST_NOSUID and flags & os.ST_NODEV):
                    raise SandboxError(f"{source} is not on a nosuid,nodev mount")
        except (OSError, SandboxError) as exc:
            BindRoot.release(slot, remove=False)
            raise SandboxError(f"cannot bind the session into a pooled container: {exc}"
                               ) from exc

    @staticmethod
    def release(slot: Slot, *, remove: bool = True) -> None:
        """Detach whatever is bound on the slot; remove its directories (its container is
        gone)."""
        for target in (slot.workspace, slot.tmp):
            with contextlib.suppress(OSError):
                while _detach(str(target)):
                    pass
        if remove:
            with contextlib.suppress(OSError):
                for target in (slot.workspace, slot.tmp, slot.path):
                    os.rmdir(target)

    def close(self) -> None:
        if not self.opened:
            return
        self.opened = False
        for child in list(self.path.iterdir()) if self.path.is_dir() else []:
            self.release(Slot(child))
        _remove_root(self.path)
        if self._guard is not None:
            self._guard.stop()
            self._guard = None

    def sweep(self) -> None:
        """Bind roots left by supervisors that are gone: detached and removed."""
        if not self.parent.is_dir():
            return
        for root in self.parent.iterdir():
            pid = root.name.split("-", 1)[0]
            if pid.isdigit() and int(pid) != os.getpid() and not Path(f"/proc/{pid}").exists():
                for child in list(root.iterdir()):
                    self.release(Slot(child))
                _remove_root(root)


def pooled_template(spec: ContainerSpec, workdir: str) -> ContainerSpec | None:
    """The tenant's class of a session call's spec: its workspace (at ``workdir``) and /tmp
    binds from a slot yet to be made, no session label; None when it binds no workspace or
    runs under another runtime than runc."""
    if spec.runtime != "runc" or not any(m.target == workdir for m in spec.mounts):
        return None
    late = {workdir: "workspace", TMP_TARGET: "tmp"}
    mounts = tuple(
        m.model_copy(update={"source": f"{PLACEHOLDER}/{late[m.target]}",
                             "propagation": "rslave"}) if m.target in late else m
        for m in spec.mounts)
    return spec.model_copy(update={"mounts": mounts,
                                   "labels": {**spec.labels, LABEL_SESSION: ""}})


def is_template(spec: ContainerSpec) -> bool:
    return any(m.source.startswith(PLACEHOLDER + "/") for m in spec.mounts)


def slotted(spec: ContainerSpec, slot: Slot) -> ContainerSpec:
    """A template's spec with its slot's directories as the late binds' sources."""
    mounts: list[BindMount] = []
    for m in spec.mounts:
        if m.source.startswith(PLACEHOLDER + "/"):
            own = slot.path / m.source.removeprefix(PLACEHOLDER + "/")
            m = m.model_copy(update={"source": str(own)})
        mounts.append(m)
    return spec.model_copy(update={"mounts": tuple(mounts)})


def _remove_root(root: Path) -> None:
    """Only empty directories are removed (``rmdir``): never a tree, which could reach into
    a session's files through a bind that did not come off."""
    try:
        while _detach(str(root)):
            pass
        os.rmdir(root)
    except OSError as exc:  # a busy leftover: the next start's sweep tries again
        log.warning("bind_root_not_removed", root=str(root), error=str(exc))
