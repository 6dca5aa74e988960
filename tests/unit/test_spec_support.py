"""The pieces around ContainerSpec: seccomp profile, output capture, instance id, mount flags."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from runtime.errors import ConfigError
from runtime.sandbox.docker.capture import StreamCapture
from runtime.sandbox.docker.hostmounts import mount_options
from runtime.sandbox.docker.seccomp import (
    DEFAULT_PROFILE_PATH,
    DENIED_SYSCALLS,
    allowed_syscalls,
    derive_profile,
    load_profile,
)
from runtime.sandbox.instance import load_instance_id


def test_shipped_profile_denies_what_we_promise() -> None:
    profile = json.loads(load_profile())
    assert profile["defaultAction"] == "SCMP_ACT_ERRNO"
    allowed = allowed_syscalls(profile)
    for name in ("ptrace", "process_vm_readv", "process_vm_writev", "keyctl", "add_key",
                 "request_key", "bpf", "userfaultfd", "io_uring_setup", "io_uring_enter",
                 "io_uring_register", "perf_event_open", "unshare", "mount", "setns"):  # fmt: skip
        assert name not in allowed
    for name in ("read", "write", "execve", "clone", "futex", "socket", "openat"):
        assert name in allowed, f"{name} is needed by ordinary programs"


def test_derive_profile_strips_denied_names_from_every_rule() -> None:
    docker_default = {
        "defaultAction": "SCMP_ACT_ERRNO",
        "syscalls": [
            {"names": ["read", "ptrace", "io_uring_setup"], "action": "SCMP_ACT_ALLOW"},
            {"names": ["ptrace"], "action": "SCMP_ACT_ALLOW", "includes": {"minKernel": "4.8"}},
            {"names": ["bpf"], "action": "SCMP_ACT_ALLOW", "includes": {"caps": ["CAP_BPF"]}},
        ],
    }
    derived = derive_profile(docker_default)
    assert derived["syscalls"] == [{"names": ["read"], "action": "SCMP_ACT_ALLOW"}]
    assert "ptrace" in allowed_syscalls(docker_default), "input left untouched"


def test_a_weakened_profile_file_is_refused(tmp_path: Path) -> None:
    profile = json.loads(DEFAULT_PROFILE_PATH.read_text())
    profile["syscalls"].append({"names": ["ptrace"], "action": "SCMP_ACT_ALLOW"})
    weakened = tmp_path / "weak.json"
    weakened.write_text(json.dumps(profile))
    with pytest.raises(ConfigError, match="ptrace"):
        load_profile(weakened)
    allow_all = tmp_path / "allow.json"
    allow_all.write_text(json.dumps({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": []}))
    with pytest.raises(ConfigError, match="deny by default"):
        load_profile(allow_all)
    assert DENIED_SYSCALLS >= {"ptrace", "keyctl", "bpf", "userfaultfd", "perf_event_open"}


def feed_all(capture: StreamCapture, data: bytes, piece: int) -> bytes:
    live = b"".join(capture.feed(data[i : i + piece]) for i in range(0, len(data), piece))
    capture.close()
    return live


@pytest.mark.parametrize("piece", [1, 7, 1000, 100_000])
def test_capture_keeps_head_and_tail_and_the_full_artifact(tmp_path: Path, piece: int) -> None:
    data = bytes(i % 251 for i in range(10_000))
    path = tmp_path / "artifacts" / "s" / "e.stdout"
    capture = StreamCapture(name="stdout", cap=1024, artifact_path=path, artifact_max=1 << 20)
    live = feed_all(capture, data, piece)
    assert capture.truncated and capture.size == len(data)
    assert live == data[:1024], "only what fits under the cap streams live"
    result = capture.result()
    assert result.startswith(data[:512]) and result.endswith(data[-512:])
    assert b"8976 bytes omitted" in result
    assert capture.artifact == path and path.read_bytes() == data
    assert oct(path.stat().st_mode & 0o777) == "0o600"


def test_capture_below_the_cap_keeps_everything_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "e.stdout"
    capture = StreamCapture(name="stdout", cap=1024, artifact_path=path, artifact_max=1 << 20)
    assert feed_all(capture, b"x" * 1024, 100) == b"x" * 1024
    assert not capture.truncated and capture.result() == b"x" * 1024
    assert capture.artifact is None and not path.exists()


def test_capture_never_writes_through_a_planted_symlink(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious")
    path = tmp_path / "e.stdout"
    path.symlink_to(victim)
    capture = StreamCapture(name="stdout", cap=1024, artifact_path=path, artifact_max=1 << 20)
    feed_all(capture, b"y" * 5000, 1000)
    assert victim.read_text() == "precious"
    assert capture.artifact is None and not capture.artifact_complete
    assert capture.result().startswith(b"y" * 512), "the call still gets its head and tail"


def test_artifact_stops_at_its_maximum(tmp_path: Path) -> None:
    path = tmp_path / "e.stdout"
    capture = StreamCapture(name="stdout", cap=1024, artifact_path=path, artifact_max=4096)
    feed_all(capture, b"z" * 10_000, 1000)
    assert path.stat().st_size == 4096 and not capture.artifact_complete
    assert capture.size == 10_000


def test_instance_id_is_created_once_and_kept(tmp_path: Path) -> None:
    first = load_instance_id(tmp_path)
    assert first == load_instance_id(tmp_path)
    assert (tmp_path / "instance_id").read_text().strip() == first
    other = tmp_path / "other"
    assert load_instance_id(other) != first


def test_a_broken_instance_id_file_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "instance_id").write_text("../../etc\n")
    with pytest.raises(ConfigError):
        load_instance_id(tmp_path)


def test_mount_options_finds_the_mount_a_path_lives_on(tmp_path: Path) -> None:
    point, options = mount_options(tmp_path)
    assert os.path.realpath(tmp_path).startswith(point)
    assert options & {"rw", "ro"}
