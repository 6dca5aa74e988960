"""Local vs node, call by call (part of `navi bench cluster`), for three kinds of call:

- **hop**: warm `print(1)` (`code_exec`);
- **user_tool**: an agent-written user tool (`write_tool` once, then `add {a, b}` by name
  through `/exec`: the tools-runner image under the policy's user-tool tier, gVisor);
- **kernel**: a kernel execute (`x = x + 1` on `/kernels/default/execute`, after a first
  execute `x = 0` that starts the kernel; the python image, which has IPython).

Each kind gets a fresh session on the server without a cluster and one on the cluster node;
its first calls run before the window (a session's first call is cold, a kernel's first
execute starts it), then `runs` rounds of one call per side, THINK_S apart, local and node
alternated (same load); p50/p95 per side and the difference of the p50s.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from dataclasses import dataclass
from typing import Any, Protocol

from bench.exec_api import THINK_S, LeanClient


class Server(Protocol):
    """What the kinds need of a server (`bench.cluster_bench.Server`)."""

    port: int
    token: str

    async def ready(self) -> None: ...

    async def session(self) -> tuple[str, str]: ...

KERNEL_IMAGE = "python"  # a kernel runs in code_exec's container; it needs IPython
KIND_IMAGES = ("tools-runner", KERNEL_IMAGE)  # what a node needs for the kinds

ADD_TOOL = '''name = "add"
description = "Add two numbers."
parameters = {"type": "object", "properties": {"a": {"type": "number"},
              "b": {"type": "number"}}, "required": ["a", "b"]}

async def execute(params):
    return str(params["a"] + params["b"])
'''


@dataclass(frozen=True)
class Kind:
    path: str                       # under /v1/sessions/{id}
    first: tuple[dict[str, Any], ...]  # calls before the window
    body: dict[str, Any]            # the timed call
    expect: tuple[str, Any]         # a field of its answer and its value

    async def call(self, server: Server, client: LeanClient, session: str,
                   body: dict[str, Any]) -> dict[str, Any]:
        status, raw = await client.post(f"/v1/sessions/{session}{self.path}", body,
                                        server.token)
        out = json.loads(raw)
        if status != 200 or not out.get("ok"):
            raise RuntimeError(f"{self.path} failed: {status} {raw[:300]!r}")
        return dict(out)


PRINT = {"tool": "code_exec", "args": {"language": "python", "code": "print(1)"}}
KINDS = {
    "hop": Kind("/exec", (PRINT,), PRINT, ("stdout", "1\n")),
    "user_tool": Kind("/exec", ({"tool": "write_tool", "args": {"name": "add", "code": ADD_TOOL}},
                                {"tool": "add", "args": {"a": 2, "b": 3}}),
                      {"tool": "add", "args": {"a": 2, "b": 3}}, ("output", "5")),
    "kernel": Kind("/kernels/default/execute", ({"code": "x = 0"},), {"code": "x = x + 1"},
                   ("error", None)),
}


def _summary(values: list[float]) -> dict[str, float]:
    ms = sorted(v * 1000 for v in values)
    return {"p50_ms": round(statistics.median(ms), 2),
            "p95_ms": round(ms[min(len(ms) - 1, int(len(ms) * 0.95))], 2),
            "mean_ms": round(statistics.fmean(ms), 2), "n": len(ms)}


async def local_vs_node(kind: Kind, local: Server, remote: Server, runs: int
                        ) -> dict[str, Any]:
    """`kind` on each server (both ready), alternated call by call."""
    servers = {"local": local, "node": remote}
    sessions = {where: await server.session() for where, server in servers.items()}
    clients = {where: await LeanClient.connect(server.port) for where, server in servers.items()}
    times: dict[str, list[float]] = {"local": [], "node": []}
    field, value = kind.expect
    try:
        for where in times:
            for body in kind.first:
                await kind.call(servers[where], clients[where], sessions[where][0], body)
        for _ in range(runs):
            for where in times:
                await asyncio.sleep(THINK_S)
                started = time.perf_counter()
                out = await kind.call(servers[where], clients[where], sessions[where][0],
                                      kind.body)
                times[where].append(time.perf_counter() - started)
                assert out["node"] == sessions[where][1] and out.get(field) == value, out
    finally:
        for client in clients.values():
            await client.close()
    result: dict[str, Any] = {w: _summary(v) for w, v in times.items()}
    result["node_id"] = sessions["node"][1]
    result["hop_p50_ms"] = round(result["node"]["p50_ms"] - result["local"]["p50_ms"], 2)
    return result


async def all_kinds(local: Server, remote: Server, runs: int, kinds: bool
                    ) -> dict[str, dict[str, Any]]:
    """The hop, then (with `kinds`) the user tool and the kernel, on the same two servers."""
    await local.ready()
    await remote.ready()
    names = list(KINDS) if kinds else ["hop"]
    return {name: await local_vs_node(KINDS[name], local, remote, runs) for name in names}
