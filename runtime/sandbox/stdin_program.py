"""Tenant code reaches its container over stdin, never on a command line.

A container's argv is in the engine's container config (``docker inspect``, on disk) and in
every one of its processes' ``/proc/<pid>/cmdline``, which any user of the host may read;
one argv string is also capped at 128 KiB. So the argv of a call or a process that runs
tenant code holds only a constant stub, and the code goes first on the container's stdin as
a frame the stub reads before anything else; what follows the frame is the program's own
stdin (a background process's input, say), untouched.

- ``python_program``: ``python3 -I -c STUB``; the frame is a 4-byte big-endian length and
  the code (UTF-8, lone surrogates passed). The stub compiles it as ``-c`` would
  (``<string>``, no inherited ``__future__`` flags) and runs it in ``__main__``'s globals
  with no name of its own left there; ``sys.argv`` is ``['-c']``; an uncaught exception's
  traceback starts at the code's frame, and the exit status is the interpreter's (1, or
  the ``SystemExit`` code, or a SIGINT exit). A warm runner runs the same argv in-process.
- ``shell_program``: ``bash --noprofile --norc -c STUB bash [cwd]``; the frame is the command
  and a NUL (commands hold none). bash's ``read`` takes a pipe byte by byte, so not a byte
  of what follows is consumed. The stub (optionally ``cd``s, then) ``eval``s it with ``$0``
  ``bash`` and no positional parameters, as ``bash -c`` would. What differs: bash is the
  command's parent even for one simple command (``bash -c`` would ``exec`` it), so a
  signal for the command must reach its process group (process containers run their init
  with ``TINI_KILL_PROCESS_GROUP``), and a syntax error is reported as ``bash: eval: ...``.

Both refuse to run a frame cut short (the supervisor died mid-write): exit 125 and nothing
run.
"""

from __future__ import annotations

PYTHON_STUB = """\
def _navi_program():
    import os
    del globals()["_navi_program"]
    def rd(n):
        b = b""
        while len(b) < n:
            c = os.read(0, n - len(b))
            if not c:
                os.write(2, b"navi: the program did not arrive whole\\n")
                os._exit(125)
            b += c
        return b
    text = rd(int.from_bytes(rd(4), "big")).decode("utf-8", "surrogatepass")
    return compile(text, "<string>", "exec", dont_inherit=True)
try:
    exec(_navi_program())
except BaseException as _navi_e:
    _navi_e.__traceback__ = _navi_e.__traceback__.tb_next  # from the code's own frame
    if _navi_e.__traceback__ is not None and \\
            _navi_e.__traceback__.tb_frame.f_code.co_name == "_navi_program":
        _navi_e.__traceback__ = None  # it did not compile: no frame, as under -c
    raise
"""

SHELL_STUB = ('IFS= read -r -d "" __navi_program || { echo "navi: the command did not arrive '
              'whole" >&2; exit 125; }; eval "unset __navi_program;$__navi_program"')
SHELL_CD_STUB = 'cd -- "$1" || exit 125; shift; ' + SHELL_STUB

PYTHON_ARGV = ("python3", "-I", "-c", PYTHON_STUB)
BASH = ("bash", "--noprofile", "--norc", "-c")

TINI_GROUP_ENV = {"TINI_KILL_PROCESS_GROUP": "1"}
"""For a container whose main program is ``shell_program``'s bash: the init forwards a
signal to the whole process group, so the command gets it as it would have under ``bash -c``
(where it was the main program itself)."""


def python_program(code: str) -> tuple[list[str], bytes]:
    """(argv, stdin frame) that run ``code`` as ``python3 -I -c code`` would."""
    data = code.encode("utf-8", "surrogatepass")
    return list(PYTHON_ARGV), len(data).to_bytes(4, "big") + data


def shell_program(command: str, cwd: str | None = None) -> tuple[list[str], bytes]:
    """(argv, stdin frame) that run ``command`` as ``bash -c command`` would, from ``cwd``
    when given (exit 125 when it cannot be entered)."""
    if "\x00" in command:
        raise ValueError("a command cannot contain a NUL byte")
    frame = command.encode("utf-8", "surrogatepass") + b"\x00"
    if cwd is None:
        return [*BASH, SHELL_STUB, "bash"], frame
    return [*BASH, SHELL_CD_STUB, "bash", cwd], frame
