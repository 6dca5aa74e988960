"""The control-plane side of a node: `SessionNode` over Ray to a node agent.

- `remote`: `RemoteNode` (disks, state, files, backend) and `agent_for` (find or make the
  node's agent); `RemoteBackend` (calls, their output streamed back, tool objects by hash).
- `files`: a session's files on a node (`OpenFiles` over the hop, chunked streams).
- `hop`: the actor handle and what its failure means (`NodeUnavailable`).
"""
