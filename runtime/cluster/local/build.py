"""`navi cluster local`: build, read and end a real multi-node Ray cluster on one machine.

Everything `up` makes is written to the state file before it is made, so `down` (and a
half-failed `up`, which calls it) ends every process by pid and removes every namespace,
veth and directory, and nothing else.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import structlog

from runtime.cluster.local import engines, netns, rayproc
from runtime.cluster.local.state import ClusterState, NodeRecord, load, save, state_path
from runtime.errors import ClusterError

log = structlog.get_logger(__name__)

LOCK_DIR = "/run"  # flock on the directory itself: a lock that leaves no file behind
NEEDED = ("dockerd", "containerd", "raylet")


@contextmanager
def _machine_lock() -> Iterator[None]:
    fd = os.open(LOCK_DIR, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


class AlreadyUp(Exception):
    def __init__(self, state: ClusterState) -> None:
        super().__init__(state.address)
        self.state = state


def up(
    directory: Path, nodes: int, images: list[str], say: Callable[[str], None] = print
) -> ClusterState:
    """Build the cluster; on any failure end and remove what was made, then raise."""
    if not 1 <= nodes <= netns.MAX_NODES:
        raise ClusterError(f"--nodes must be 1..{netns.MAX_NODES}")
    directory = directory.resolve()
    old = load(directory)
    if old is not None and old.up:
        raise AlreadyUp(old)
    if old is not None:
        down(directory)
    wanted = engines.host_images(images)
    created = not directory.exists()
    directory.mkdir(parents=True, exist_ok=True)
    with _machine_lock():
        slot = next((k for k in range(netns.MAX_SLOTS) if not netns.slot_in_use(k)), None)
        if slot is None:
            raise ClusterError("no free local-cluster slot (64 are up)")
        state = ClusterState(
            dir=str(directory), created_dir=created, slot=slot,
            head_ip=netns.addresses(slot, 1)[0], port=20000 + 100 * slot + 3,
            token_file=str(directory / "keys" / "cluster-token"),
            ray_temp=f"/tmp/navi-ray-c{slot}", run_root=f"/run/navi-c{slot}",
        )
        save(state)
        try:
            for i in range(1, nodes + 1):
                _make_node_net(state, i)
        except BaseException:
            down(directory)
            raise
    try:
        _start(state, wanted, say)
    except BaseException:
        down(directory)
        raise
    return state


def _make_node_net(state: ClusterState, i: int) -> None:
    host_ip, node_ip = netns.addresses(state.slot, i)
    run_dir = Path(state.run_root) / f"n{i}"
    state.nodes.append(NodeRecord(
        id=f"n{i}", netns=netns.netns_name(state.slot, i),
        veth_host=netns.veth_name(state.slot, i), host_ip=host_ip, node_ip=node_ip,
        run_dir=str(run_dir), data_root=str(Path(state.dir) / "nodes" / f"n{i}" / "docker"),
        socket=str(run_dir / "docker.sock"),
    ))
    save(state)
    netns.create_node_net(state.slot, i)


def _start(state: ClusterState, images: list[str], emit: Callable[[str], None]) -> None:
    token = Path(state.token_file)
    rayproc.write_token(token)
    t0 = time.monotonic()
    rayproc.start_head(state.head_ip, state.port, state.slot, Path(state.ray_temp), token)
    emit(f"head up at {state.address} ({time.monotonic() - t0:.1f} s)")
    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=len(state.nodes) + 1) as pool:
        started = [pool.submit(engines.start_engine, n.netns, Path(n.run_dir),
                               Path(n.data_root), Path(n.socket), node_storage(n))
                   for n in state.nodes]
        tar = Path(state.run_root) / "images.tar"
        engines.save_images(images, tar)
        for engine in started:
            engine.result()
        loads = [pool.submit(engines.load_images, Path(n.socket), tar) for n in state.nodes]
        for done in loads:
            done.result()
    tar.unlink()
    emit(f"{len(state.nodes)} engines up with {len(images)} images "
         f"({', '.join(images)}) in {time.monotonic() - t0:.1f} s")
    t0 = time.monotonic()
    for n in state.nodes:
        _start_ray_node(state, n)
    emit(f"{len(state.nodes)} Ray nodes up ({time.monotonic() - t0:.1f} s)")
    state.up = True
    save(state)


def start_again(directory: Path, node_id: str) -> None:
    """Start a node's Ray processes again after they died (its namespace and engine stay):
    the same id, address and engine, so its sessions find their files again."""
    state = load(directory.resolve())
    node = next((n for n in state.nodes if n.id == node_id), None) if state else None
    if state is None or node is None:
        raise ClusterError(f"no node {node_id!r} in a local cluster at {directory}")
    _start_ray_node(state, node)


def _start_ray_node(state: ClusterState, node: NodeRecord) -> None:
    """The node's Ray processes, in its engine's mount namespace, with its own data dir
    (`engines.NODE_DATA` there: the node agent's session disks, keys, artifacts, tool
    objects)."""
    pidfile = Path(node.run_dir) / "docker.pid"
    try:
        engine = int(pidfile.read_text().strip())
    except (OSError, ValueError):
        raise ClusterError(f"the engine of node {node.id} is not running") from None
    rayproc.start_node(node.netns, node.id, node.node_ip, state.address,
                       Path(state.token_file), Path(node.socket), os.cpu_count() or 1,
                       engine, engines.NODE_DATA)


def node_storage(node: NodeRecord) -> Path:
    """Where the node's data dir is kept on this machine (`<dir>/nodes/<id>/navi`); the node
    sees it as `engines.NODE_DATA`, in its own mount namespace, which the control plane
    does not see."""
    return Path(node.data_root).parent / "navi"


def node_pids(node: NodeRecord) -> dict[str, int]:
    inode = netns.netns_inode(node.netns)
    if inode is None:
        return {}
    named: dict[str, int] = {}
    for pid in sorted(netns.pids_in_netns(inode)):
        named[rayproc.process_name(pid, named)] = pid
    return named


def head_pids(state: ClusterState) -> dict[str, int]:
    return rayproc.head_pids(Path(state.ray_temp), os.stat("/proc/self/ns/net").st_ino)


def status(directory: Path) -> dict[str, object] | None:
    state = load(directory.resolve())
    if state is None:
        return None
    nodes = []
    for n in state.nodes:
        pids = node_pids(n)
        alive = state.up and all(k in pids for k in NEEDED)
        nodes.append({"id": n.id, "state": "alive" if alive else "dead", "ip": n.node_ip,
                      "socket": n.socket, "pids": pids})
    head = head_pids(state)
    return {"address": state.address, "token_file": state.token_file,
            "head": {"state": "alive" if "gcs_server" in head else "dead", "pids": head},
            "nodes": nodes}


def _end(pids: list[int], patient: set[int] | None = None, grace: float = 2.0) -> None:
    """SIGTERM each pid, then SIGKILL what is left after `grace` s; the `patient` ones (the
    engines, which unmount and stop containers on SIGTERM) get up to 15 s. Ray's processes
    keep nothing worth a slow exit (a raylet takes 10 s on SIGTERM, the GCS never ends)."""
    for pid in pids:
        _signal(pid, signal.SIGTERM)
    start = time.monotonic()
    while any(_alive(p) for p in pids):
        waited = time.monotonic() - start
        if waited > 15 or (waited > grace and not any(_alive(p) for p in patient or ())):
            break
        time.sleep(0.1)
    for pid in pids:
        _signal(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.05)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def down(directory: Path) -> bool:
    """End and remove the cluster in `directory`; False when none was there."""
    directory = directory.resolve()
    state = load(directory)
    if state is None:
        return False
    procs = [node_pids(n) for n in state.nodes]
    engines_ = {pid for named in procs for name, pid in named.items() if "docker" in name
                or "containerd" in name}
    _end([pid for named in procs for pid in named.values()] + list(head_pids(state).values()),
         engines_)
    for _ in range(50):  # an engine's children may outlive a first sweep
        left = [pid for n in state.nodes for pid in node_pids(n).values()]
        if not left:
            break
        _end(left, grace=0.5)
    for n in state.nodes:
        netns.delete_node_net(n.netns, n.veth_host)
    shutil.rmtree(state.run_root, ignore_errors=True)
    shutil.rmtree(state.ray_temp, ignore_errors=True)
    if state.created_dir:
        shutil.rmtree(directory, ignore_errors=True)
    else:
        for part in ("nodes", "keys"):
            shutil.rmtree(directory / part, ignore_errors=True)
        state_path(directory).unlink(missing_ok=True)
    return True
