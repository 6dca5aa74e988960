"""A guard process that releases the supervisor's mounts when the supervisor dies.

``kill -9`` runs no clean-up code, so the supervisor starts this child with a pipe: the child
blocks reading it, and the kernel closes the supervisor's end however the supervisor ends.
On end-of-file the child detaches every mount under the workspaces root (session disks and
the root's own bind mount) and exits. It runs in its own session and ignores SIGINT/SIGTERM,
so a Ctrl-C to the terminal reaches the supervisor (which cleans up itself) but not the guard.

    guard = MountGuard.start(root)   # in the supervisor, after reconciling
    guard.stop()                     # graceful shutdown, after the supervisor's own clean-up
"""

from __future__ import annotations

import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from runtime.workspace.mount_table import release_all_under


@dataclass
class MountGuard:
    process: subprocess.Popen[bytes]

    @classmethod
    def start(cls, root: Path) -> MountGuard:
        process = subprocess.Popen(
            [sys.executable, "-m", "runtime.workspace.mount_guard", str(root)],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, close_fds=True,
        )
        return cls(process)

    def stop(self) -> None:
        """Close our end: the guard releases what is left (nothing, after a clean close)."""
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def main(root: str) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while sys.stdin.buffer.read(4096):
        pass  # nothing is ever sent: end-of-file means the supervisor is gone
    release_all_under(root)


if __name__ == "__main__":
    main(sys.argv[1])
