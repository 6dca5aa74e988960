"""Thaws the session filesystem `navi backup` froze, should `navi backup` die while copying it.

Why: FIFREEZE holds every writer of a session's filesystem until FITHAW, and the kernel does
not thaw it when the process that froze it dies. The server's own freezes are covered (its
mount guard releases, and a release thaws first); a `navi backup` killed mid-copy (SIGKILL,
the OOM killer, a cron timeout) would leave a user's session hanging on its next write.

So the backup starts this module as a child process (its own session: a Ctrl-C or a kill of
the backup's process group leaves it alone) and tells it on a pipe which session it is about
to copy (``+<session dir>``) and when that copy is over (``-``). When the pipe ends with a
copy still open (its parent is gone, however it went), the guard takes the image's lock
(``image_copy.image_lock``: no snapshot of the server's can be between its freeze and its
thaw then) and thaws that filesystem; one that was not frozen answers EINVAL, which is fine.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path
from types import TracebackType


class FreezeGuard:
    """The parent's side: ``with FreezeGuard() as guard: guard.copying(d); …; guard.copied()``."""

    def __init__(self) -> None:
        self._child: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> FreezeGuard:
        self._child = subprocess.Popen(
            [sys.executable, "-m", "runtime.freeze_guard"], stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL, close_fds=True, start_new_session=True)
        return self

    def _say(self, line: str) -> None:
        assert self._child is not None and self._child.stdin is not None
        self._child.stdin.write(line.encode() + b"\n")
        self._child.stdin.flush()

    def copying(self, session_dir: Path) -> None:
        self._say("+" + str(session_dir))

    def copied(self) -> None:
        self._say("-")

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        child, self._child = self._child, None
        if child is None:
            return
        assert child.stdin is not None
        with contextlib.suppress(OSError):
            child.stdin.write(b"-\n")  # whatever was copying has ended: nothing to thaw
            child.stdin.close()
        child.wait(timeout=30)


def main() -> int:
    open_copy: str | None = None
    for raw in sys.stdin.buffer:
        line = raw.rstrip(b"\n").decode(errors="replace")
        if line.startswith("+"):
            open_copy = line[1:]
        elif line == "-":
            open_copy = None
    if open_copy:  # the parent went away in the middle of a copy
        # imported only now: the guard starts (and, mostly, ends) without runtime.workspace
        from runtime.workspace.image_copy import image_lock
        from runtime.workspace.mount_table import thaw

        with image_lock(Path(open_copy)):
            thaw(open_copy)
    return 0


if __name__ == "__main__":
    sys.exit(main())
