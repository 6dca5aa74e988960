"""A second Docker engine of the test's own: its own data root, exec root, pidfile, unix
socket and bridge (a bridge device made for it, never docker0), no iptables, no
/etc/docker/daemon.json. The main engine (/var/run/docker.sock) is never touched: other
tests run on it. Images are copied in with `docker save | docker load`."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import tempfile
import time
from pathlib import Path


class SecondEngine:
    def __init__(self, root: Path) -> None:
        self.root = root
        # unix socket paths are short (108 bytes): containerd's live below the exec root
        self.exec_root = Path(tempfile.mkdtemp(prefix="nve-", dir="/tmp"))
        self.socket = self.exec_root / "d.sock"
        self.host = f"unix://{self.socket}"
        self.bridge = "nvt" + secrets.token_hex(3)
        self.subnet = f"10.{200 + secrets.randbelow(50)}.{secrets.randbelow(250)}"
        self.process: subprocess.Popen[bytes] | None = None
        (root / "daemon.json").write_text("{}\n")

    def make_bridge(self) -> None:
        subprocess.run(["ip", "link", "add", self.bridge, "type", "bridge"], check=True)
        subprocess.run(["ip", "addr", "add", f"{self.subnet}.1/24", "dev", self.bridge],
                       check=True)
        subprocess.run(["ip", "link", "set", self.bridge, "up"], check=True)

    def start(self, timeout: float = 60) -> None:
        log = (self.root / "dockerd.log").open("ab")
        self.process = subprocess.Popen(
            ["dockerd", "--data-root", str(self.root / "data-root"),
             "--exec-root", str(self.exec_root), "--pidfile", str(self.root / "dockerd.pid"),
             "-H", self.host, "--iptables=false", "--ip-masq=false", "--ip-forward=false",
             "--bridge", self.bridge, "--config-file", str(self.root / "daemon.json")],
            stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError("second dockerd exited: " + self.log()[-2000:])
            if self.docker("info", check=False).returncode == 0:
                return
            time.sleep(0.5)
        raise RuntimeError("second dockerd did not come up: " + self.log()[-2000:])

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> None:
        """Stop *this* engine (by its own pid)."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(sig)
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def close(self) -> None:
        self.stop()
        subprocess.run(["ip", "link", "del", self.bridge], check=False)
        subprocess.run(["rm", "-rf", str(self.exec_root)], check=False)

    def docker(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["docker", "-H", self.host, *args], capture_output=True,
                              text=True, check=check, env={**os.environ, "DOCKER_HOST": ""})

    def copy_image(self, ref: str) -> None:
        save = subprocess.Popen(["docker", "-H", "unix:///var/run/docker.sock", "save", ref],
                                stdout=subprocess.PIPE)
        assert save.stdout is not None
        with save.stdout:
            subprocess.run(["docker", "-H", self.host, "load", "-q"], stdin=save.stdout,
                           check=True, capture_output=True)
        assert save.wait() == 0

    def log(self) -> str:
        return (self.root / "dockerd.log").read_text(errors="replace")
