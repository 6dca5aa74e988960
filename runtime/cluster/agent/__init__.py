"""The node side: what runs on an execution node, in its node agent (a Ray actor).

- `actor`: `NodeAgent`, the actor: validates each request (`runtime.nodes.wire`), resolves
  it to the node's own directories, runs it on the node's machine (`runtime.nodes.machine`).
- `objects`: the node's tool-object directory (files a call mounts, by content hash).
- `cluster_addresses`: the cluster's own machines, which the node's egress proxies refuse.

Nothing here imports the control side (`runtime.cluster.control`) or the cluster.
"""
