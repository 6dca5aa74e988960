"""`navi cluster local`: a real multi-node Ray cluster on one machine (development, tests).

- `build`: up, status, start_again, down (what `up` makes is in the state file first).
- `netns`: each node's network namespace and veth pair.
- `engines`: each node's Docker engine in that namespace, its images, and the node's data
  directory (`NODE_DATA`) in that engine's mount namespace only.
- `rayproc`: the head's and the nodes' Ray processes.
- `state`: the state file.

The control plane (`runtime.cluster.link`, `plane`, `serving`) never imports this package.
"""

from runtime.cluster.local.build import AlreadyUp, down, node_storage, start_again, status, up

__all__ = ["AlreadyUp", "down", "node_storage", "start_again", "status", "up"]
