"""`navi bench engine`'s accounting over a /proc and cgroup tree written to disk: which shims
count in a window, what a shim born in it is padded by, what reaches a shim from a container
removed while running, and that the breakdown's totals are the sum of its parts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.engine_acct import (
    HALF_TICK_S,
    TICK_S,
    ShimTracker,
    daemon_pids,
    foreign_started,
    read_times,
    shim_window,
    snapshot,
)
from bench.engine_bench import COMPONENTS, ENGINE, breakdown

PREFIX = "/navi/bench-t-"


class Host:
    """A fake /proc (pid 1's orphans, shims, their children), bundles and a cpuacct tree."""

    def __init__(self, root: Path) -> None:
        self.proc, self.bundles, self.cgroups = root / "proc", root / "bundles", root / "cg"
        (self.proc / "1" / "task" / "1").mkdir(parents=True)
        self.orphans: list[int] = []
        self.machine(0)
        self.usage(0)

    def machine(self, busy_ticks: int) -> None:
        (self.proc / "stat").write_text(f"cpu  {busy_ticks} 0 0 9999 0 0 0 0 0 0\n")

    def usage(self, ns: int) -> None:
        group = self.cgroups / (PREFIX + "cold").lstrip("/")
        group.mkdir(parents=True, exist_ok=True)
        (group / "cpuacct.usage").write_text(f"{ns}\n")

    def process(self, pid: int, comm: str, ticks: tuple[int, int, int, int], state: str = "S",
                start: int = 5, argv: list[str] | None = None, parent: int = 1) -> None:
        d = self.proc / str(pid)
        (d / "task" / str(pid)).mkdir(parents=True, exist_ok=True)
        fields = [state, str(parent), *["0"] * 9, *map(str, ticks), "0", "0", "1", "0",
                  str(start), "0"]
        (d / "stat").write_text(f"{pid} ({comm}) {' '.join(fields)}\n")
        (d / "comm").write_text(comm + "\n")
        (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in (argv or [comm])) + b"\0")
        (d / "task" / str(pid) / "children").write_text("")
        if parent == 1 and pid not in self.orphans:
            self.orphans.append(pid)
        elif parent != 1:
            kids = self.proc / str(parent) / "task" / str(parent) / "children"
            kids.write_text(f"{kids.read_text()} {pid}")
        (self.proc / "1" / "task" / "1" / "children").write_text(
            " ".join(map(str, self.orphans)))

    def shim(self, pid: int, cid: str, cgroup: str, ticks: tuple[int, int, int, int],
             state: str = "S") -> None:
        (self.bundles / cid).mkdir(parents=True, exist_ok=True)
        (self.bundles / cid / "config.json").write_text(
            json.dumps({"linux": {"cgroupsPath": f"{cgroup}/{cid}"}}))
        argv = ["/usr/bin/containerd-shim-runc-v2", "-namespace", "moby", "-id", cid]
        self.process(pid, "containerd-shim", ticks, state, argv=argv)

    def gone(self, pid: int) -> None:
        for path in sorted((self.proc / str(pid)).rglob("*"), reverse=True):
            path.unlink() if path.is_file() else path.rmdir()
        (self.proc / str(pid)).rmdir()
        self.orphans = [p for p in self.orphans if p != pid]
        (self.proc / "1" / "task" / "1" / "children").write_text(
            " ".join(map(str, self.orphans)))


@pytest.fixture
def host(tmp_path: Path) -> Host:
    return Host(tmp_path)


def test_read_times_takes_fields_14_to_17_and_the_start_time(host: Host) -> None:
    host.process(42, "a b) c", (3, 4, 50, 60), state="Z", start=777)
    times = read_times(42, host.proc)
    assert times is not None
    assert (times.state, times.start) == ("Z", 777)
    assert times.self_s == pytest.approx(7 * TICK_S)
    assert times.children_s == pytest.approx(110 * TICK_S)
    assert read_times(43, host.proc) is None


def test_a_window_counts_our_shims_by_what_they_used_inside_it(host: Host) -> None:
    tracker = ShimTracker(PREFIX, proc=host.proc, bundles=host.bundles)
    host.process(100, "dockerd", (10, 10, 0, 0))
    host.process(101, "containerd", (5, 5, 2, 0), parent=100)
    daemons = {"dockerd": 100, "containerd": 101}
    host.shim(200, "before", PREFIX + "cold", (1, 1, 9, 9))  # gone before the window
    host.shim(300, "across", PREFIX + "cold", (2, 0, 4, 0))  # alive at its start
    tracker.tick()
    host.gone(200)
    tracker.tick()
    begin = snapshot(tracker, daemons, PREFIX + "cold", host.cgroups)

    host.shim(400, "born", PREFIX + "cold", (1, 1, 0, 0))  # born and ended in the window
    host.shim(500, "theirs", "/docker", (50, 50, 50, 50))  # another engineer's container
    host.process(401, "docker-init", (3, 0, 0, 0), parent=400)
    tracker.tick()
    host.gone(401)
    host.shim(400, "born", PREFIX + "cold", (3, 2, 20, 10), state="Z")  # final, as a zombie
    host.shim(300, "across", PREFIX + "cold", (5, 1, 10, 2))
    host.process(100, "dockerd", (30, 20, 0, 0))
    host.process(101, "containerd", (9, 6, 12, 0), parent=100)
    host.usage(25 * 10**6)
    host.machine(400)
    tracker.tick()
    end = snapshot(tracker, daemons, PREFIX + "cold", host.cgroups)

    window = shim_window(tracker, begin, end)
    pad = 2 * HALF_TICK_S  # the born shim's utime and stime, each truncated once
    assert window["shim_s"] == pytest.approx((5 + 1 - 2) * TICK_S + (3 + 2) * TICK_S + pad)
    assert window["shim_children_s"] == pytest.approx((12 - 4) * TICK_S + 30 * TICK_S + pad)
    assert (window["started"], window["exited"], window["not_final"]) == (1, 1, 0)
    assert window["kids_reaped_s"] == pytest.approx(3 * TICK_S)
    assert foreign_started(tracker, begin, end) == 1

    calls = 2
    cold = breakdown(tracker, begin, end, calls, cores=2)
    ms = cold["cpu_ms_per_call"]
    assert set(ms) == set(COMPONENTS)
    assert ms["dockerd"] == pytest.approx(30 * TICK_S * 1000 / calls)
    assert ms["containerd"] == pytest.approx(5 * TICK_S * 1000 / calls)
    assert ms["shim_bootstrap"] == pytest.approx(10 * TICK_S * 1000 / calls)
    assert ms["container"] == pytest.approx(12.5)
    assert ms["runc"] == pytest.approx(window["shim_children_s"] * 500 - 12.5, abs=0.01)
    engine = sum(ms[k] for k in ENGINE)
    assert cold["engine_ms_per_call"] == pytest.approx(engine, abs=0.05)
    assert cold["total_ms_per_call"] == pytest.approx(
        engine + ms["container"] + ms["supervisor"], abs=0.05)
    assert cold["ceiling_calls_per_s"] == pytest.approx(
        2000 / cold["total_ms_per_call"], abs=0.1)
    assert cold["machine_busy_ms_per_call"] == pytest.approx(400 * TICK_S * 500)

    warm = breakdown(tracker, begin, end, calls, cores=2, removed_running=True)
    assert warm["cpu_ms_per_call"]["runc"] == pytest.approx(
        (window["shim_children_s"] - 3 * TICK_S) * 500, abs=0.01)


def test_the_daemons_are_the_default_engine_and_its_own_containerd(host: Host) -> None:
    """Another engine on the host (a local cluster's dockerd and containerd, started
    earlier: lower pids) must not stand in for the default one."""
    host.process(50, "dockerd", (0, 0, 0, 0))
    host.process(51, "containerd", (0, 0, 0, 0), parent=50)
    host.process(70, "dockerd", (0, 0, 0, 0))
    host.process(71, "containerd", (0, 0, 0, 0), parent=70)
    pidfile = host.proc.parent / "docker.pid"
    pidfile.write_text("70\n")
    assert daemon_pids(host.proc, pidfile) == {"dockerd": 70, "containerd": 71}
