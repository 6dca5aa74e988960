"""An unfinished upload's writer dropped on the event loop's thread (garbage-collected, not
aborted) discards its temporary file on the disk pool: with the filesystem frozen (a
snapshot's copy) the drop returns at once, and the file goes once it thaws (real loop mount)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time

import pytest

from runtime.workspace import Workspace
from runtime.workspace.disk import SessionDisks, loop_mounts_available
from runtime.workspace.image_copy import FIFREEZE
from runtime.workspace.mount_table import thaw
from runtime.workspace.paths import RESERVED_PREFIX

pytestmark = pytest.mark.skipif(not loop_mounts_available(), reason="needs root and loops")
MiB = 1024 * 1024


def test_a_dropped_writer_on_a_frozen_disk_does_not_block_its_thread(disks: SessionDisks
                                                                      ) -> None:
    session = disks.root / "t" / "s1"
    disks.create(session, 32 * MiB)
    ws = Workspace(os.open(session, os.O_RDONLY | os.O_DIRECTORY))
    point = os.open(session, os.O_RDONLY | os.O_DIRECTORY)
    try:
        writer = ws.writer("up.bin")
        writer.write(b"x" * 4096)
        assert any(n.startswith(RESERVED_PREFIX) for n in os.listdir(session))
        fcntl.ioctl(point, FIFREEZE, 0)
        try:
            unfreeze = threading.Timer(1.0, thaw, args=(str(session),))  # whatever happens
            unfreeze.start()
            started = time.monotonic()
            del writer  # its last reference: finalized here, on this thread
            took = time.monotonic() - started
        finally:
            unfreeze.join()
        assert took < 0.2, f"dropping the writer waited {took:.2f} s for the frozen disk"
        deadline = time.monotonic() + 5
        while any(n.startswith(RESERVED_PREFIX) for n in os.listdir(session)):
            assert time.monotonic() < deadline, "the temporary file stayed"
            time.sleep(0.05)
    finally:
        with contextlib.suppress(OSError):
            thaw(str(session))
        ws.close()
        os.close(point)
        disks.remove(session)
