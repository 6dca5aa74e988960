"""The node's own tool-object directory: files a call mounts, kept by their SHA-256.

Why: a user tool's code is a file on the control plane; a node cannot mount it from there.
The control plane sends its hash (and, the first time, its bytes); the node keeps the
bytes here (`<node data>/tool-objects/<sha256>`, root-owned, read-only), checked to hash to
their name, and the call mounts the node's copy. A call naming a hash the node does not
hold, with no bytes, is refused (`NotFound`); bytes that do not hash to their name are
`InvalidInput`. Each object is at most `MAX_OBJECT_BYTES`.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import tempfile
from pathlib import Path

from runtime.errors import InvalidInput, NotFound
from runtime.nodes.wire import MAX_OBJECT_BYTES

_NAME = re.compile(r"^[0-9a-f]{64}$")


class NodeObjects:
    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, sha256: str) -> Path:
        if not _NAME.fullmatch(sha256):
            raise InvalidInput("a tool object is named by its SHA-256")
        return self.root / sha256

    def put(self, sha256: str, data: bytes) -> Path:
        """Keep `data` under its hash (once: an object never changes)."""
        target = self.path(sha256)
        if len(data) > MAX_OBJECT_BYTES:
            raise InvalidInput(f"a tool object is at most {MAX_OBJECT_BYTES} bytes")
        if hashlib.sha256(data).hexdigest() != sha256:
            raise InvalidInput("the tool object's bytes do not hash to its name")
        if target.is_file():
            return target
        self.root.mkdir(parents=True, exist_ok=True, mode=0o755)
        fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".put-")
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.chmod(tmp, 0o444)
            os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        return target

    def get(self, sha256: str) -> Path:
        """The node's copy, checked to be a plain file (never a link) under its name."""
        target = self.path(sha256)
        try:
            st = os.lstat(target)
        except FileNotFoundError:
            raise NotFound(f"the node holds no tool object {sha256[:12]}") from None
        if not os.path.isfile(target) or os.path.islink(target) or st.st_size > MAX_OBJECT_BYTES:
            raise InvalidInput(f"tool object {sha256[:12]} is not a plain file")
        return target
