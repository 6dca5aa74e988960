"""The in-container runner of a warm container, and the job frame the backend sends it.

A warm container is created and started with the same hardened ``ContainerSpec`` as a cold
one; only its argv differs: ``python3 -I -S -c RUNNER``. The runner writes one ready byte on
stdout (so the pool knows the container is up), then blocks on stdin for exactly one job:
a 4-byte big-endian length and that many bytes of JSON ``{"argv", "nonce", "linger"}``.
It forks; the child ``execvp``s the job's argv (a fresh program; SIGPIPE/SIGXFSZ back to
default as under a cold container's init) with the container's env and workdir, except for
``python3 -I -c CODE [args]`` (what ``code_exec`` runs): the runner is itself ``python3 -I``,
so the child runs CODE in a fresh ``__main__`` as that command would, without paying a
second interpreter start-up (the container, and so the interpreter, serves this one job).
What follows the frame on stdin is the job's stdin, up to EOF.
When the job exits, the runner writes the trailer ``\\0navi-end-<nonce>:<exit code>\\n`` on
stdout and on stderr: the backend ends the call at the two trailers (each stream is ordered,
so no output of the job is lost) instead of waiting ~20 ms for the engine to tear the
container down, then removes it. A job that forges a trailer needs the nonce (never on its
argv, env or stdin) and could only misreport its own exit code.

Then the runner exits, or, when the frame says ``linger`` (seconds) and the job exited
normally, waits that long to be removed: a container's exit keeps the engine busy for a few
milliseconds on every core, and that work would land on the call's audit outcome and answer;
the backend's removal (after the call is settled) comes later and kills everything in the
container alike. The backend asks for it only where it reads the exit state from the
trailer and the cgroup's OOM counter, never from the engine (``drive.exit_state``).

Passed inline (not baked into the image) so every image with a ``python3`` can run warm;
one without falls back to cold calls (the runner never reports ready).
"""

from __future__ import annotations

import json

READY = b"\x00"
LINGER_S = 30.0  # at most; the backend removes a used container once its call is settled
END = b"\x00navi-end-"

RUNNER = """\
import os, json, signal, sys
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
argv, end = job["argv"], b"\\x00navi-end-" + job["nonce"].encode() + b":"
linger = float(job.get("linger", 0))
inproc = len(argv) >= 4 and argv[:3] == ["python3", "-I", "-c"]
pid = os.fork()
if pid == 0 and inproc:
    del job, end
    import types
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = __builtins__
    sys.modules["__main__"] = main
    sys.argv = ["-c", *argv[4:]]
    try:
        exec(compile(argv[3], "<string>", "exec"), main.__dict__)
    except SystemExit:
        raise
    except BaseException as e:
        e.__traceback__ = e.__traceback__.tb_next
        sys.excepthook(type(e), e, e.__traceback__)
        sys.exit(1)
elif pid == 0:
    for s in (signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(s, signal.SIG_DFL)
    try:
        os.execvp(argv[0], argv)
    except OSError as e:
        os.write(2, ("navi: cannot run %r: %s\\n" % (argv[0], e.strerror)).encode())
        os._exit(127 if isinstance(e, FileNotFoundError) else 126)
else:
    os.close(0)
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    trailer = end + str(code).encode() + b"\\n"
    os.write(1, trailer)
    os.write(2, trailer)
    if code >= 0 and linger > 0:
        import time
        time.sleep(linger)
    os._exit(code if code >= 0 else 128 - code)
"""

RUNNER_ARGV = ("python3", "-I", "-c", RUNNER)


def job_frame(argv: list[str], nonce: str, linger_s: float = 0.0) -> bytes:
    """The bytes that hand ``argv`` to a waiting runner; ``nonce`` marks its end trailer;
    ``linger_s``: how long the runner waits to be removed after a job that exited normally."""
    body = json.dumps({"argv": argv, "nonce": nonce, "linger": linger_s}).encode()
    return len(body).to_bytes(4, "big") + body
