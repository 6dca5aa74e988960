"""The data filesystem fills up, or turns read-only, under a running `navi serve`.

The data dir is a 128 MiB ext4 image loop-mounted under the test's tmp dir. The operator's
own process fills it (a file next to the data, not through a session): new calls are
refused with 507 `disk_full` before anything starts (no container, no audit record), the
chain still verifies, and once the filler is deleted the server takes calls again by
itself. Then the kernel remounts the filesystem read-only (an ext4 error with
`errors=remount-ro`): calls are refused with 503 `data_readonly`, reads still work.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from runtime.workspace.mount_table import mounts_under
from tests.e2e.conftest import start_server, stop_server
from tests.faults.helpers import (
    audit_of,
    containers_of,
    instance_id,
    loop_device,
    new_session,
    run,
    small_filesystem,
    verify,
    wait_until,
)

pytestmark = pytest.mark.docker


def fill(path: Path, leave_bytes: int) -> None:
    st = os.statvfs(path.parent)
    size = st.f_bavail * st.f_frsize - leave_bytes
    subprocess.run(["fallocate", "-l", str(size), str(path)], check=True)


def read_only(mnt: Path) -> bool:
    """ext4's emergency read-only state shows only on a write (not in statvfs)."""
    try:
        (mnt / "probe").write_bytes(b"")
    except OSError:
        return True
    return False


def test_full_then_read_only_data_disk(tmp_path: Path) -> None:
    with small_filesystem(tmp_path) as mnt:
        data = mnt / "data"
        server = start_server(tmp_path, extra_env={"NAVI_DATA_DIR": str(data),
                                                   "NAVI_DISK_RESERVE_MB": "8",
                                                   "NAVI_WARM_POOL_SIZE": "0"})
        server.data_dir = data
        try:
            tenant, token = server.tenant_with_user()
            with server.client(token) as client:
                session = new_session(client)
                ok = run(client, session, "print(6 * 7)")
                assert ok.status_code == 200 and ok.json()["stdout"] == "42\n", ok.text
                before = audit_of(server, tenant=tenant)
                instance = instance_id(data)

                filler = mnt / "operator-backup.tar"
                fill(filler, leave_bytes=2 * 1024 * 1024)
                time.sleep(0.6)  # the guard looks at most every 0.5 s
                refused = [
                    run(client, session, "print(1)"),
                    client.post("/v1/sessions", json={}),
                    client.put(f"/v1/sessions/{session}/files/a.txt", content=b"x" * 4096),
                    client.post(f"/v1/sessions/{session}/messages", json={"content": "hi"}),
                ]
                for resp in refused:
                    assert resp.status_code == 507, resp.text
                    assert resp.json()["error"]["code"] == "disk_full"
                    assert resp.headers["retry-after"]
                assert containers_of(instance) == []
                assert audit_of(server, tenant=tenant) == before  # nothing half-recorded
                assert verify(server)["ok"] is True
                listing = client.get(f"/v1/sessions/{session}/files")  # reads still work
                assert listing.status_code == 200 and "a.txt" not in listing.text

                filler.unlink()  # space returns: the server recovers by itself
                time.sleep(0.6)
                again = run(client, session, "print(1)")
                assert again.status_code == 200 and again.json()["stdout"] == "1\n", again.text
                assert client.put(f"/v1/sessions/{session}/files/a.txt",
                                  content=b"x").status_code in (200, 201)
                assert verify(server)["ok"] is True

                # The kernel turns the filesystem read-only (as on an I/O error).
                trigger = Path(f"/sys/fs/ext4/{loop_device(mnt)}/trigger_fs_error")
                trigger.write_text("navi fault test\n")
                assert wait_until(lambda: read_only(mnt), 10)
                time.sleep(0.6)
                for resp in (run(client, session, "print(1)"),
                             client.delete(f"/v1/sessions/{session}/files/a.txt")):
                    assert resp.status_code == 503, resp.text
                    assert resp.json()["error"]["code"] == "data_readonly"
                assert containers_of(instance) == []
                assert client.get(f"/v1/sessions/{session}/files").status_code == 200
                assert verify(server)["ok"] is True
        finally:
            stop_server(server)
        assert mounts_under(data) == [], server.ending()
