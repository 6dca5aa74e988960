"""Arrows point down (docs/architecture.md, "Layers"): the import circles and upward arrows
that were taken out stay out. Imports are read from the source with `ast`, those under
`if TYPE_CHECKING:` included: a type-only import still ties the lower module to the higher one
for its next reader."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def module_of(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path) -> set[str]:
    """The `runtime.*` modules a file imports (a `from pkg import name` counts as pkg.name
    when that is a module of ours, else as pkg)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("runtime"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                and node.module.startswith("runtime"):
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                as_file = ROOT / Path(*sub.split("."))
                found.add(sub if as_file.with_suffix(".py").is_file() or as_file.is_dir()
                          else node.module)
    return found


@cache
def graph(package: str) -> dict[str, set[str]]:
    files = sorted((ROOT / Path(*package.split("."))).rglob("*.py"))
    return {module_of(f): {m for m in imports(f) if m.startswith(package)} for f in files}


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in edges.get(node, ()):
            if nxt not in edges:
                continue
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                top = stack.pop()
                group.append(top)
                if top == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in edges:
        if node not in index:
            visit(node)
    return found


def test_circles_are_found() -> None:
    """The check itself, on a made-up graph: a -> b -> c -> a is one circle, d stands apart."""
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(edges) == [["a", "b", "c"]]


def test_the_workspace_package_has_no_import_circle() -> None:
    """The disk counts and removes snapshots through their layout, which stands below it; the
    snapshot store (which needs the manager) stands above (was disk -> snapshots -> manager
    -> disk)."""
    assert circles(graph("runtime.workspace")) == []


def test_the_node_agent_does_not_import_the_control_plane() -> None:
    """The node side (`runtime.cluster.agent`) never imports the control plane's side
    (`runtime.cluster.control`), the cluster's joining and placing (`serving`, `plane`,
    `link`, `placement`) or the local-cluster builder: they share only the wire models, the
    errors and the machine start-up. The cluster's own addresses, which a node's egress
    proxies refuse, are read by the node agent alone (`runtime.cluster.agent.cluster_addresses`)."""
    apart = tuple(f"runtime.cluster.{m}" for m in
                  ("control", "serving", "plane", "link", "placement", "local"))
    for path in (ROOT / "runtime" / "cluster" / "agent").glob("*.py"):
        assert [m for m in imports(path) if m.startswith(apart)] == [], path


def test_the_control_side_does_not_import_the_local_cluster_builder() -> None:
    for path in (ROOT / "runtime" / "cluster" / "control").glob("*.py"):
        assert not [m for m in imports(path) if m.startswith("runtime.cluster.local")], path


def test_nodes_stand_below_the_features_that_run_on_them() -> None:
    """`runtime.nodes` (where a session is, the node registry, the wire models) stands below
    processes and kernels, which place their work through it; the node agent and the control
    plane's side of the wire, which use both, stand above in `runtime.cluster` (was the
    folder-level circle nodes <-> processes, nodes <-> kernels)."""
    graph_all = graph("runtime")
    up = {f"{module}: {m}" for module, found in graph_all.items()
          if module.startswith("runtime.nodes") for m in found
          if m.startswith(("runtime.cluster", "runtime.processes", "runtime.kernels"))}
    assert sorted(up) == []
    up = {f"{module}: {m}" for module, found in graph_all.items()
          if module.startswith(("runtime.processes", "runtime.kernels")) for m in found
          if m.startswith("runtime.cluster")}
    assert sorted(up) == []


def test_sessions_do_not_import_the_api() -> None:
    """Sessions stand below the API: they take narrow protocols (`runtime.sessions.deps`),
    not the API's `Services`, and a tenant's name and uid come from `runtime.store.tenants`
    (was the 5-file circle api/services -> sessions/snapshots -> sessions/lifecycle ->
    api/services, with api/token_watch and sessions/principal)."""
    up = {f"{module}: {m}" for module, found in graph("runtime").items()
          if module.startswith("runtime.sessions") for m in found
          if m.startswith("runtime.api")}
    assert sorted(up) == []


def test_the_store_has_no_import_circle() -> None:
    """The tenant id/name types sit in `runtime.store.ids`, below the records and the store."""
    assert circles(graph("runtime.store")) == []


def test_no_circle_between_the_api_and_the_sessions() -> None:
    edges = graph("runtime")
    tied = [c for c in circles(edges)
            if any(m.startswith("runtime.sessions") for m in c)]
    assert tied == []


def test_the_ports_package_has_no_import_circle() -> None:
    """The preview origin takes what it needs of the ports service as a protocol
    (`PreviewSource`); the service builds the origin (was origin <-> service)."""
    assert circles(graph("runtime.ports")) == []


def test_the_api_does_not_import_the_fronts_above_it() -> None:
    """The E2B bridge imports the API (its auth, errors, responses), so the API must not
    import it back: `runtime.server` mounts both (was api/app.py -> runtime.e2b)."""
    up = {f"{module}: {m}" for module, found in graph("runtime").items()
          if module.startswith("runtime.api") for m in found
          if m.startswith(("runtime.e2b", "runtime.server", "runtime.commands"))}
    assert sorted(up) == []


ABOVE_THE_API = ("runtime.api", "runtime.e2b", "runtime.server", "runtime.commands",
                 "runtime.cli")


def test_nothing_below_the_api_imports_it() -> None:
    """Every package below the API takes what it needs of the server as a `Protocol`
    (sessions/deps.py, agent/deps.py, processes/deps.py, cluster/serving.py:JoinDeps):
    0 arrows back up (was sessions/ and cluster/serving.py -> api/services.py)."""
    up = {f"{module}: {m}" for module, found in graph("runtime").items()
          if not module.startswith(ABOVE_THE_API) for m in found
          if m.startswith("runtime.api")}
    assert sorted(up) == []


def test_the_e2b_bridge_and_the_mcp_endpoint_take_narrow_protocols() -> None:
    """The E2B bridge and the MCP endpoint take what they use of the server as a `Protocol`
    (`runtime/e2b/deps.py:BridgeDeps`, `runtime/api/mcp/deps.py:McpDeps`), not the whole
    `Services` (was handed to both whole)."""
    whole = {f"{module}: {m}" for module, found in graph("runtime").items()
             if module.startswith(("runtime.e2b", "runtime.api.mcp")) for m in found
             if m == "runtime.api.services" or m.startswith("runtime.api.services.")}
    assert sorted(whole) == []
