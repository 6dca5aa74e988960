"""`navi doctor` on a real engine: passes on this host, fails closed when something is missing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.docker


def doctor(data_dir: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runtime.cli", "doctor", "--data-dir", str(data_dir), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=120,
        check=False,
    )


def test_doctor_passes_and_reports_every_promise(tmp_path: Path, sandbox_image: str) -> None:
    done = doctor(tmp_path, "--image", sandbox_image, "--json")
    checks = {c["name"]: c for c in json.loads(done.stdout)}
    assert done.returncode == 0, done.stdout + done.stderr
    assert all(c["ok"] for c in checks.values())
    for promise in (
        "no capabilities (CapEff 0)",
        "no-new-privileges (NoNewPrivs 1)",
        "seccomp filter active (Seccomp 2)",
        "no network but lo",
        "read-only root filesystem",
        "memory cgroup limit (134217728 bytes)",
        "pids cgroup limit (64)",
        "workspace nosuid,nodev",
        "gVisor tier registered",
        "gVisor: its own kernel answers (not the host's)",
        "gVisor: no network but lo",
        "gVisor: non-root user",
        "gVisor: read-only root filesystem",
        "gVisor: seccomp profile enforced inside (ptrace EPERM)",
    ):
        assert promise in checks


def test_doctor_fails_closed_on_a_missing_image(tmp_path: Path) -> None:
    done = doctor(tmp_path, "--image", "navi-test/does-not-exist:0")
    assert done.returncode == 1
    assert "[FAIL] image navi-test/does-not-exist:0" in done.stdout
    assert "Traceback" not in done.stderr


def test_doctor_fails_closed_without_an_engine(tmp_path: Path) -> None:
    done = doctor(tmp_path, DOCKER_HOST=f"unix://{tmp_path}/no.sock")
    assert done.returncode == 1
    assert "[FAIL] engine reachable" in done.stdout
    assert "Traceback" not in done.stderr
