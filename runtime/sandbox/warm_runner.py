"""The in-container runner of a warm container, and the job frame the backend sends it.

A warm container is created and started with the same hardened ``ContainerSpec`` as a cold
one; only its argv differs: ``python3 -I -S -c RUNNER``. The runner writes one ready byte on
stdout (so the pool knows the container is up), then blocks on stdin for exactly one job:
a 4-byte big-endian length and that many bytes of JSON ``{"argv": [...]}``. It then
``execvp``s the job's argv: the job is a fresh program (a fresh interpreter for python) in
the runner's own process, with the container's env and workdir; what follows the frame on
stdin is the job's stdin, up to EOF. The container exits with the job, and is removed.

Passed inline (not baked into the image) so every image with a ``python3`` can run warm;
one without falls back to cold calls (the runner never reports ready).
"""

from __future__ import annotations

import json

READY = b"\x00"

RUNNER = """\
import os, json
def rd(n):
    b = b""
    while len(b) < n:
        c = os.read(0, n - len(b))
        if not c:
            os._exit(125)
        b += c
    return b
os.write(1, b"\\x00")
job = json.loads(rd(int.from_bytes(rd(4), "big")))
argv = job["argv"]
try:
    os.execvp(argv[0], argv)
except OSError as e:
    os.write(2, ("navi: cannot run %r: %s\\n" % (argv[0], e.strerror)).encode())
    os._exit(127 if isinstance(e, FileNotFoundError) else 126)
"""

RUNNER_ARGV = ("python3", "-I", "-S", "-c", RUNNER)


def job_frame(argv: list[str]) -> bytes:
    """The bytes that hand ``argv`` to a waiting runner."""
    body = json.dumps({"argv": argv}).encode()
    return len(body).to_bytes(4, "big") + body
