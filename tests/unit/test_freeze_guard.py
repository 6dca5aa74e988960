"""A `navi backup` killed while a session's filesystem is frozen for its copy: the freeze
guard (runtime.freeze_guard) thaws it, so the session's writers go on. Real loop mounts, a
real process killed with SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from runtime.workspace.disk import SessionDisks, loop_mounts_available
from runtime.workspace.mount_table import thaw

pytestmark = pytest.mark.skipif(not loop_mounts_available(), reason="needs root and loop devices")

ROOT = Path(__file__).resolve().parents[2]
MiB = 1024 * 1024

# What `navi backup` does around a copy, then dies in the middle of it: the guard is told,
# the filesystem is frozen (as copy_image freezes it), and the process is killed.
BACKUP = textwrap.dedent("""
    import fcntl, os, sys, time
    from pathlib import Path
    from runtime.freeze_guard import FreezeGuard
    from runtime.workspace.image_copy import FIFREEZE, image_lock
    session = Path(sys.argv[1])
    with FreezeGuard() as guard, image_lock(session):
        guard.copying(session)
        fd = os.open(session, os.O_RDONLY | os.O_DIRECTORY)
        fcntl.ioctl(fd, FIFREEZE, 0)
        if sys.argv[2] == "copied":
            guard.copied()
        print("frozen", flush=True)
        time.sleep(600)
""")



def killed_while_frozen(session: Path, say: str) -> None:
    proc = subprocess.Popen([sys.executable, "-c", BACKUP, str(session), say], cwd=ROOT,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    with proc.stdout:
        try:
            assert proc.stdout.readline() == "frozen\n"
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


def write_returns(path: Path, timeout_s: float) -> bool:
    """Does a write (with fsync) to ``path`` come back within ``timeout_s``?"""
    done = threading.Event()

    def write() -> None:
        with path.open("wb") as fh:
            fh.write(b"still writable")
            fh.flush()
            os.fsync(fh.fileno())
        done.set()

    threading.Thread(target=write, daemon=True).start()
    return done.wait(timeout_s)


def test_a_killed_backup_leaves_no_session_frozen(disks: SessionDisks) -> None:
    session = disks.root / "t" / "s1"
    disks.create(session, 32 * MiB)
    killed_while_frozen(session, "copying")
    assert write_returns(session / "after.txt", 10), "the session stayed frozen"
    assert (session / "after.txt").read_bytes() == b"still writable"


def test_the_guard_thaws_nothing_after_the_copy(disks: SessionDisks) -> None:
    """Told the copy is over, the guard leaves the filesystem alone (here frozen on
    purpose, as a snapshot of the server's could have it then)."""
    session = disks.root / "t" / "s2"
    disks.create(session, 32 * MiB)
    killed_while_frozen(session, "copied")
    try:
        assert not write_returns(session / "blocked.txt", 2)
    finally:
        thaw(str(session))
    assert write_returns(session / "after.txt", 10)
