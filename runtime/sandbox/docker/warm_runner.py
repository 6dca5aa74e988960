"""The in-container runner of a warm container, and the job frame the backend sends it.

A warm container is created and started with the same hardened ``ContainerSpec`` as a cold
one; only its argv differs: ``python3 -I -c RUNNER``. The runner forks the process that will
run the job first, then writes one ready byte on stdout (so the pool knows the container is
up) and blocks on stdin for exactly one job: a 4-byte big-endian length and that many bytes
of length-prefixed fields: the nonce, ``linger`` and the argv (``job_frame``; no ``json``:
its import is the runner's largest start-up cost). It passes the argv alone to the waiting
child, which ``execvp``s it (a fresh program; SIGPIPE/SIGXFSZ back to default as under a
cold container's init) with the container's env and workdir, except for ``python3 -I -c CODE
[args]`` (what ``code_exec`` runs): the runner is itself ``python3 -I``, so the child runs
CODE in a fresh ``__main__`` as that command would, without paying a second interpreter
start-up (the container, and so the interpreter, serves this one job).
It ends as that command's exit is seen from inside (non-daemon threads joined, ``atexit``,
the job's globals cleared so ``__del__`` runs and unclosed files flush, ``gc``, stdio flushed,
``SystemExit``'s code), then ``_exit``s instead of freeing the interpreter (3-9 ms a call).
Once the argv is in, the child enters its workdir again by path: in a tenant's pooled container
(``late_bind.py``) the session's workspace was mounted on it after the runner started there.
What follows the frame on stdin is the job's stdin, up to EOF.

When the job exits, the runner writes the trailer ``\\0navi-end-<nonce>:<exit code>\\n`` on
stdout and on stderr: the backend ends the call at the two trailers (each stream is ordered,
so no output of the job is lost) instead of waiting ~20 ms for the engine to tear the
container down, then removes it. The job must never write one itself (a promise of the
security model, docs/security.md: a warm job cannot forge its own exit status), so the
nonce never comes within its reach:
- it is not in the job's memory: the child was forked before the frame was read, and is
  handed the argv only;
- the job cannot read the runner's memory, nor tini's (``/proc/<pid>/mem``, also writable
  there): on runc the child enters a Landlock domain of its own, whose ptrace rules shut
  every process outside it (its only handled right, making block devices, needs a
  capability no sandbox has); gVisor refuses such access by itself. Before it reports
  ready the child checks that both are shut, else the runner stops (the pool's launch
  fails, calls run cold);
- nothing the job left running sees the trailer go by (a pipe can be reopened for reading
  through /proc/self/fd): the runner first SIGKILLs every process but tini, its own
  ancestors (navi-stdio under gVisor) and itself, until none is left.
The job can still kill the runner: then there is no trailer, and the call ends as a cold
one, with the container's status (128+N).

Then the runner exits, or, when the frame says ``linger`` (seconds) and the job exited
normally, waits that long to be removed: a container's exit keeps the engine busy for a few
milliseconds on every core, and that work would land on the call's audit outcome and answer;
the backend's removal (after the call is settled) comes later. The backend asks for it only
where it reads the exit state from the trailer and the cgroup's OOM counter, never from the
engine (``drive.exit_state``).

Passed inline (not baked into the image) so every image with a ``python3`` (and ctypes) can
run warm; one without falls back to cold calls (the runner never reports ready).
"""

from __future__ import annotations

READY = b"\x00"
LINGER_S = 30.0  # at most; the backend removes a used container once its call is settled
END = b"\x00navi-end-"

RUNNER = """\
import ctypes, os, sys, time, _signal  # before the fork: the two share its pages
libc = ctypes.CDLL(None, use_errno=True)
def rd(fd, n):
    b = b""
    while len(b) < n:
        c = os.read(fd, n - len(b))
        if not c:
            os._exit(125)
        b += c
    return b
def fields(b):
    out, i = [], 0
    while i < len(b):
        n = int.from_bytes(b[i:i + 4], "big")
        out.append(b[i + 4:i + 4 + n].decode("utf-8", "surrogatepass"))
        i += 4 + n
    return out
keep = {1, os.getpid()}  # tini, us and our ancestors: all else is the job's
up = os.getppid()
while up not in keep:
    keep.add(up)
    with open("/proc/%d/stat" % up, "rb") as f:
        up = int(f.read().rsplit(b") ", 1)[1].split()[1])
go_r, go_w = os.pipe()
ok_r, ok_w = os.pipe()
pid = os.fork()  # before the frame: the nonce never enters the job's memory
if pid == 0:
    os.close(go_w)
    os.close(ok_r)
    attr = (1 << 11).to_bytes(8, sys.byteorder)  # a Landlock domain (runc) shuts out the rest
    ruleset = libc.syscall(444, attr, 8, 0)
    if ruleset >= 0:
        libc.syscall(446, ruleset, 0)
        os.close(ruleset)
    shut = True  # no /proc/<pid>/mem of the runner or tini open to the job, or no warm
    for other in (1, os.getppid()):
        try:
            os.close(os.open("/proc/%d/mem" % other, os.O_RDONLY))
            shut = False
        except OSError:
            pass
    os.write(ok_w, b"1" if shut else b"0")
    os.close(ok_w)
    argv = fields(rd(go_r, int.from_bytes(rd(go_r, 4), "big")))
    os.close(go_r)
    try:  # by path: a pooled container's session was mounted on its workdir after start
        os.chdir(os.getcwd())
    except OSError:
        pass
    if len(argv) >= 4 and argv[:3] == ["python3", "-I", "-c"]:
        import types
        main = types.ModuleType("__main__")
        main.__dict__["__builtins__"] = __builtins__
        sys.modules["__main__"] = main
        sys.argv = ["-c", *argv[4:]]
        status = 0
        try:
            exec(compile(argv[3], "<string>", "exec"), main.__dict__)
        except SystemExit as e:  # as the interpreter's own exit handles it
            status = e.code
            if status is None:
                status = 0
            elif not isinstance(status, int):
                print(status, file=sys.stderr)
                status = 1
        except BaseException as e:
            e.__traceback__ = e.__traceback__.tb_next
            sys.excepthook(type(e), e, e.__traceback__)
            status = 1
        # What the interpreter's exit does that a program can see, then _exit: freeing the
        # whole interpreter would cost the call 3-6 ms (runc), 5-9 ms (gVisor)
        if "threading" in sys.modules:
            sys.modules["threading"]._shutdown()  # non-daemon threads run to their end
        import atexit, gc
        atexit._run_exitfuncs()
        main.__dict__.clear()  # the job's objects go: __del__, unclosed files flushed
        gc.collect()
        for f in (sys.stdout, sys.stderr):
            try:
                f.flush()
            except Exception:
                status = 120
        os._exit(status & 0xFF)
    else:
        for s in (_signal.SIGPIPE, _signal.SIGXFSZ):
            _signal.signal(s, _signal.SIG_DFL)
        try:
            os.execvp(argv[0], argv)
        except OSError as e:
            os.write(2, ("navi: cannot run %r: %s\\n" % (argv[0], e.strerror)).encode())
            os._exit(127 if isinstance(e, FileNotFoundError) else 126)
else:
    os.close(go_r)
    os.close(ok_w)
    if rd(ok_r, 1) != b"1":
        os.write(2, b"navi: the job could open /proc/<pid>/mem of the runner or tini\\n")
        os._exit(126)
    os.close(ok_r)
    os.write(1, b"\\x00")
    job = rd(0, int.from_bytes(rd(0, 4), "big"))  # fields: nonce, linger, then the argv
    a = 4 + int.from_bytes(job[:4], "big")
    b = a + 4 + int.from_bytes(job[a:a + 4], "big")
    end = b"\\x00navi-end-" + job[4:a] + b":"
    linger = float(job[a + 4:b])
    body = job[b:]
    body = memoryview(len(body).to_bytes(4, "big") + body)
    while body:
        body = body[os.write(go_w, body):]
    os.close(go_w)
    os.close(0)
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    pause = 0.0  # end what the job left running before a trailer goes by
    while True:
        alive = []
        for name in os.listdir("/proc"):
            if name.isdigit() and int(name) not in keep:
                try:
                    with open("/proc/%s/stat" % name, "rb") as f:
                        if f.read().rsplit(b") ", 1)[1][:1] not in b"ZX":
                            alive.append(int(name))
                except (OSError, IndexError):
                    pass
        if not alive:
            break
        for p in alive:
            try:
                os.kill(p, _signal.SIGKILL)
            except OSError:
                pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            pass
        time.sleep(pause)
        pause = 0.001
    trailer = end + str(code).encode() + b"\\n"
    os.write(1, trailer)
    os.write(2, trailer)
    if code >= 0 and linger > 0:
        time.sleep(linger)
    os._exit(code if code >= 0 else 128 - code)
"""

RUNNER_ARGV = ("python3", "-I", "-c", RUNNER)


def job_frame(argv: list[str], nonce: str, linger_s: float = 0.0) -> bytes:
    """The bytes that hand ``argv`` to a waiting runner; ``nonce`` marks its end trailer;
    ``linger_s``: how long the runner waits to be removed after a job that exited normally."""
    body = b"".join(_field(x) for x in (nonce, repr(float(linger_s)), *argv))
    return len(body).to_bytes(4, "big") + body


def _field(text: str) -> bytes:
    """One length-prefixed field (any str, lone surrogates too: the runner decodes with
    ``surrogatepass``); the runner reads these without importing ``json`` (≈ 7 ms of CPU
    per container: its ``re``)."""
    data = text.encode("utf-8", "surrogatepass")
    return len(data).to_bytes(4, "big") + data
