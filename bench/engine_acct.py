"""Where the machine's CPU goes per call, read from the kernel's own accounting (cgroup v1).

Part of ``navi bench engine`` (``bench/engine_bench.py`` runs the calls). A window of calls is
bracketed by two ``Snapshot``\\ s; every figure is the difference between them:

- **dockerd**, **containerd**: ``/proc/<pid>/stat`` utime+stime (every thread, exited ones
  included); their cutime+cstime is what their reaped children used (for containerd: the
  ``containerd-shim-runc-v2 … start`` bootstrap that forks each shim and exits);
- **shims**: each ``containerd-shim-runc-v2`` is orphaned to pid 1, so a ``ShimTracker``
  thread finds them among pid 1's children every few ms, keeps those whose bundle's
  ``config.json`` puts the container under one of our cgroups, and samples them until they
  are gone: utime+stime is the shim; cutime+cstime everything it reaped: the runc/runsc
  invocations (create, start, kill, delete), the container's processes (init, the job; under
  gVisor the sandbox and the gofer) and runc init;
- **container**: ``cpuacct.usage`` (ns) of the tenant cgroup the containers ran under
  (``/navi/<tenant>``): a parent's counter keeps its removed children's time;
- **runc** = the shims' reaped children minus the container cgroup (the part outside it);
- **supervisor**: ``getrusage`` of this process (the in-process backend) minus the tracker
  thread, plus reaped children (the ``docker`` CLI of ``docker run``);
- **machine**: busy time from ``/proc/stat``, everything on the host, others' work included.

``/proc`` times are in clock ticks (10 ms), truncated per field at each read: a difference
of two reads is unbiased, a process born in the window (baseline 0) loses half a tick per
field on average, which is added back (``HALF_TICK_S``).
"""

from __future__ import annotations

import json
import os
import resource
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

DOCKER_PIDFILE = Path("/var/run/docker.pid")
PROC = Path("/proc")
CPUACCT = Path("/sys/fs/cgroup/cpuacct")
TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")
HALF_TICK_S = TICK_S / 2
BUNDLES = Path("/var/run/docker/containerd/daemon/io.containerd.runtime.v2.task/moby")


@dataclass(frozen=True)
class ProcTimes:
    """One read of ``/proc/<pid>/stat``, seconds."""

    state: str
    start: int  # starttime (ticks since boot): with the pid, the process's identity
    self_s: float
    children_s: float


def read_times(pid: int, proc: Path = PROC) -> ProcTimes | None:
    try:
        text = (proc / str(pid) / "stat").read_text()
    except OSError:
        return None
    after = text.rsplit(") ", 1)[1].split()  # after[k - 3] is field k of proc(5)
    ticks = [int(v) for v in after[11:15]]
    return ProcTimes(after[0], int(after[19]), (ticks[0] + ticks[1]) * TICK_S,
                     (ticks[2] + ticks[3]) * TICK_S)


def machine_busy_s(proc: Path = PROC) -> float:
    """user+nice+system+irq+softirq of every CPU (idle, iowait and steal left out)."""
    values = [int(v) for v in (proc / "stat").read_text().splitlines()[0].split()[1:]]
    return (values[0] + values[1] + values[2] + values[5] + values[6]) * TICK_S


def cgroup_usage_s(cgroup: str, root: Path = CPUACCT) -> float:
    """``cpuacct.usage`` of ``cgroup`` (0 before it exists: docker creates it on first use)."""
    try:
        return int((root / cgroup.lstrip("/") / "cpuacct.usage").read_text()) / 1e9
    except FileNotFoundError:
        return 0.0


def daemon_pids(proc: Path = PROC, pidfile: Path = DOCKER_PIDFILE) -> dict[str, int]:
    """dockerd (its pid file, else by name) and its own containerd (a child of that dockerd:
    other engines on the host, e.g. a local cluster's, run their own)."""
    found: dict[str, int] = {}
    try:
        found["dockerd"] = int(pidfile.read_text().strip())
    except (OSError, ValueError):
        pass
    named: dict[str, list[tuple[int, int]]] = {"dockerd": [], "containerd": []}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            comm = (entry / "comm").read_text().strip()
            parent = int((entry / "stat").read_text().rsplit(") ", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if comm in named:
            named[comm].append((int(entry.name), parent))
    if "dockerd" not in found and named["dockerd"]:
        found["dockerd"] = min(named["dockerd"])[0]
    ours = [pid for pid, parent in named["containerd"] if parent == found.get("dockerd")]
    if ours or named["containerd"]:
        found["containerd"] = min(ours or [pid for pid, _ in named["containerd"]])
    return found


@dataclass
class Shim:
    pid: int
    cid: str
    cgroup: str | None = None  # the container's cgroup (None until its bundle is read)
    seen_tick: int = 0
    first: ProcTimes | None = None
    last: ProcTimes | None = None
    gone: bool = False
    gone_tick: int | None = None


@dataclass
class Kid:
    """A process a shim will reap that is no runc/runsc run: the container's init (tini), or
    under gVisor the sandbox and the gofer."""

    pid: int
    shim: tuple[int, int]
    comm: str
    last: ProcTimes
    gone_tick: int | None = None


@dataclass
class Snapshot:
    at: float
    daemons: dict[str, ProcTimes | None]
    tick: int  # the tracker's tick this snapshot was read at
    shims: dict[tuple[int, int], ProcTimes]  # (pid, start) → times, live shims
    cgroup_s: float
    self_s: float  # this process minus the tracker thread
    children_s: float  # this process's reaped children (the docker CLI)
    machine_s: float
    tracker_cpu_s: float


@dataclass
class ShimTracker:
    """Samples every containerd shim whose container sits under ``cgroup_prefix``."""

    cgroup_prefix: str
    interval_s: float = 0.01
    proc: Path = PROC
    bundles: Path = BUNDLES
    shims: dict[tuple[int, int], Shim] = field(default_factory=dict)
    foreign: dict[tuple[int, int], int] = field(default_factory=dict)  # → tick seen
    kids: dict[tuple[int, int], Kid] = field(default_factory=dict)
    ticks: int = 0
    _skip: set[tuple[int, int]] = field(default_factory=set)  # orphans that are no shim
    cpu_s: float = 0.0  # this thread's own CPU, kept out of the supervisor's
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="shim-tracker", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.tick()
            self.cpu_s = time.thread_time()
            self._stop.wait(self.interval_s)

    def _children(self, pid: int) -> set[int]:
        """Every thread's children (an orphan goes to whichever thread of the reaper)."""
        pids: set[int] = set()
        try:
            tasks = list((self.proc / str(pid) / "task").iterdir())
        except OSError:
            return pids
        for task in tasks:
            try:
                pids.update(int(p) for p in (task / "children").read_text().split())
            except OSError:
                continue
        return pids

    def tick(self) -> None:
        with self._lock:
            self.ticks += 1
            live = {key[0] for key, shim in self.shims.items() if not shim.gone}
            for pid in self._children(1) - live:
                self._discover(pid)
            for shim in self.shims.values():
                if shim.gone:
                    continue
                if shim.cgroup is None:
                    self._classify(shim)
                times = read_times(shim.pid, self.proc)
                if times is None or (shim.first and times.start != shim.first.start):
                    shim.gone, shim.gone_tick = True, self.ticks  # final if read as "Z"
                    continue
                shim.last = times
                shim.first = shim.first or times
                if shim.cgroup:
                    self._sample_kids(shim)
            for kid in self.kids.values():
                if kid.gone_tick is None and not self._alive(kid):
                    kid.gone_tick = self.ticks
            for key in [k for k, s in self.shims.items() if s.cgroup == ""]:
                self.foreign[key] = self.shims.pop(key).seen_tick

    def _sample_kids(self, shim: Shim) -> None:
        assert shim.first is not None
        key = (shim.pid, shim.first.start)
        for pid in self._children(shim.pid):
            times = read_times(pid, self.proc)
            if times is None:
                continue
            kid = self.kids.get((pid, times.start))
            if kid is not None:
                kid.last = times
                continue
            try:
                comm = (self.proc / str(pid) / "comm").read_text().strip()
            except OSError:
                continue
            if comm not in ("runc", "runsc"):
                self.kids[(pid, times.start)] = Kid(pid, key, comm, times)

    def _alive(self, kid: Kid) -> bool:
        times = read_times(kid.pid, self.proc)
        return times is not None and times.start == kid.last.start

    def _discover(self, pid: int) -> None:
        times = read_times(pid, self.proc)  # pids are reused (pid_max 32768 here): + start
        if times is None or (pid, times.start) in self.foreign or (pid, times.start) in self._skip:
            return
        try:
            argv = (self.proc / str(pid) / "cmdline").read_bytes().split(b"\0")
        except OSError:
            return
        if not argv[0].endswith(b"containerd-shim-runc-v2") or b"-id" not in argv:
            self._skip.add((pid, times.start))
            return
        cid = argv[argv.index(b"-id") + 1].decode()
        self.shims.setdefault((pid, times.start),
                              Shim(pid, cid, seen_tick=self.ticks, first=times, last=times))

    def _classify(self, shim: Shim) -> None:
        try:
            config = json.loads((self.bundles / shim.cid / "config.json").read_text())
        except (OSError, ValueError):
            return  # not written yet: next tick
        path = str(config.get("linux", {}).get("cgroupsPath", ""))
        shim.cgroup = path if path.startswith(self.cgroup_prefix) else ""

    def live(self) -> dict[tuple[int, int], ProcTimes]:
        """The latest times of every live shim (ours, or not classified yet)."""
        with self._lock:
            return {k: s.last for k, s in self.shims.items() if not s.gone and s.last}

    def ours_alive(self, prefix: str = "") -> int:
        """Our shims (cgroup under ``prefix``) not yet exited; a zombie's times are final."""
        with self._lock:
            return sum(1 for s in self.shims.values() if s.cgroup and s.cgroup.startswith(prefix)
                       and not s.gone and s.last and s.last.state != "Z")


def _rusage_s(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def snapshot(tracker: ShimTracker, daemons: dict[str, int], cgroup: str,
             cgroup_root: Path = CPUACCT) -> Snapshot:
    tracker.tick()  # the latest shim times, read now
    tracker_cpu = tracker.cpu_s
    return Snapshot(
        at=time.monotonic(),
        tick=tracker.ticks,
        daemons={name: read_times(pid, tracker.proc) for name, pid in daemons.items()},
        shims=tracker.live(),
        cgroup_s=cgroup_usage_s(cgroup, cgroup_root),
        self_s=_rusage_s(resource.RUSAGE_SELF) - tracker_cpu,
        children_s=_rusage_s(resource.RUSAGE_CHILDREN),
        machine_s=machine_busy_s(tracker.proc),
        tracker_cpu_s=tracker_cpu,
    )


def shim_window(tracker: ShimTracker, begin: Snapshot, end: Snapshot) -> dict[str, float]:
    """Our shims' CPU between the two snapshots (self, reaped children; seconds), how many
    started and exited in between, and how many exited unseen as zombies (final times not
    read: a lower bound)."""
    out = {"shim_s": 0.0, "shim_children_s": 0.0, "started": 0, "exited": 0, "not_final": 0}
    with tracker._lock:
        shims = {k: s for k, s in tracker.shims.items() if s.cgroup and s.last}
        out["kids_reaped_s"] = sum(  # their last read: final when they idled before the end
            k.last.self_s + k.last.children_s for k in tracker.kids.values()
            if k.gone_tick is not None and begin.tick < k.gone_tick <= end.tick)
    for key, shim in shims.items():
        assert shim.last is not None
        if shim.seen_tick > end.tick or (shim.gone_tick is not None
                                          and shim.gone_tick <= begin.tick):
            continue  # born after the window or gone before it
        base, last = begin.shims.get(key), end.shims.get(key, shim.last)
        pad = 0.0 if base is not None else 2 * HALF_TICK_S  # utime, stime: truncated once
        out["shim_s"] += last.self_s - (base.self_s if base else 0.0) + pad
        out["shim_children_s"] += last.children_s - (base.children_s if base else 0.0) + pad
        out["started"] += base is None
        if (base is None or base.state != "Z") and (last.state == "Z" or key not in end.shims):
            out["exited"] += 1
            out["not_final"] += last.state != "Z"
    return out


def foreign_started(tracker: ShimTracker, begin: Snapshot, end: Snapshot) -> int:
    """Containers of others (not under our cgroups) whose shim appeared in the window."""
    with tracker._lock:
        return sum(1 for tick in tracker.foreign.values() if begin.tick < tick <= end.tick)
