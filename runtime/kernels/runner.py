"""The program a kernel's container runs: a Jupyter kernel and its client, on stdio.

This file is never imported by the supervisor: its text is the container's ``python3 -I -c``
program (``runner_argv``), so changing it needs no image rebuild. Inside the container it
starts an IPython kernel (``ipykernel``, through ``jupyter_client``'s ``KernelManager``; their
ZMQ sockets stay on the container's loopback, the container has no other network) and speaks
JSON lines with the supervisor over the container's attached stdin/stdout:

    in:  {"op": "exec", "id", "code"} | {"op": "interrupt"} | {"op": "save"}
         | {"op": "restore"}
    out: {"ev": "ready"} | {"ev": "stream", "id", "name", "text"}
         | {"ev": "result", "id", "data", "main"}
         | {"ev": "done", "id", "status", "error", "execution_count"} | {"ev": "died"}
         | {"ev": "saved", "saved", "lost", "error"} | {"ev": "restored", "restored", "lost"}

When stdin ends (the engine closes it when the server's attach goes: a server killed
without saving its kernels), the names are saved as for ``save`` before the runner exits, so
the next server restores them. Saving and restoring run as code inside the kernel itself
(``dill``, name by name, so what cannot be pickled is named in ``lost`` instead of failing
the lot): saved state is tenant data and is only ever unpickled here, in the kernel's own
sandbox.
"""

from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import sys
import threading
from typing import Any

STATE_DIR = "/run/navi/kernel"
KEEP_MIMES = ("text/plain", "image/png", "text/html")
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
VALUE_MAX = 16384
TRACEBACK_MAX = 200

SAVE_CODE = r'''
def _navi_save(state, meta):
    import dill, json, os
    ip = get_ipython()
    hidden = set(ip.user_ns_hidden) | {"In", "Out", "exit", "quit", "get_ipython"}
    names, lost = {}, []
    for key, value in list(ip.user_ns.items()):
        if key.startswith("_") or key in hidden:
            continue
        try:
            names[key] = dill.dumps(value)
        except Exception:
            lost.append(key)
    tmp = state + ".part"
    with open(tmp, "wb") as f:
        dill.dump({"v": 1, "names": names}, f)
    os.replace(tmp, state)
    with open(meta, "w") as f:
        json.dump({"saved": sorted(names), "lost": sorted(lost)}, f)
_navi_save(%r, %r)
del _navi_save
'''

RESTORE_CODE = r'''
def _navi_restore(state, meta):
    import dill, json, os
    ip = get_ipython()
    with open(state, "rb") as f:
        saved = dill.load(f)
    restored, lost = [], []
    for key, raw in saved.get("names", {}).items():
        try:
            ip.user_ns[key] = dill.loads(raw)
            restored.append(key)
        except Exception:
            lost.append(key)
    try:
        with open(meta) as f:
            lost += json.load(f).get("lost", [])
    except (OSError, ValueError):
        pass
    with open(meta, "w") as f:
        json.dump({"restored": sorted(restored), "lost": sorted(set(lost))}, f)
    os.unlink(state)
_navi_restore(%r, %r)
del _navi_restore
'''

_out_lock = threading.Lock()


def send(event: dict[str, Any]) -> None:
    line = json.dumps(event, separators=(",", ":")).encode() + b"\n"
    with _out_lock:
        sys.stdout.buffer.write(line)
        sys.stdout.buffer.flush()


def mime_bundle(data: dict[str, Any]) -> dict[str, str]:
    """The parts of a display the supervisor passes on (PNG as base64, as Jupyter has it)."""
    kept = {m: data[m] for m in KEEP_MIMES if isinstance(data.get(m), str)}
    if "text/plain" not in kept:
        kept["text/plain"] = ""
    return kept


class Runner:
    def __init__(self) -> None:
        from jupyter_client.manager import KernelManager

        os.makedirs(STATE_DIR, exist_ok=True)
        self.km = KernelManager(kernel_name="python3")
        self.km.connection_file = os.path.join(STATE_DIR, f".conn-{os.getpid()}.json")
        env = {**os.environ, "MPLBACKEND": "module://matplotlib_inline.backend_inline",
               "JUPYTER_PLATFORM_DIRS": "1", "PYDEVD_DISABLE_FILE_VALIDATION": "1"}
        self.km.start_kernel(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                             cwd=os.getcwd(),
                             extra_arguments=["--HistoryManager.enabled=False",
                                              "--IPKernelApp.trio_loop=False"])
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=120)
        try:
            os.unlink(self.km.connection_file)  # read by the kernel; nobody else needs it
        except OSError:
            pass
        self.jobs: queue.Queue[dict[str, Any]] = queue.Queue()

    def read_stdin(self) -> None:
        for raw in sys.stdin.buffer:
            try:
                job = json.loads(raw)
            except ValueError:
                continue
            if job.get("op") == "interrupt":
                try:
                    self.km.interrupt_kernel()
                except Exception as exc:  # the supervisor kills it 5 s later anyway
                    print(f"interrupt failed: {exc}", file=sys.stderr, flush=True)
            else:
                self.jobs.put(job)
        self.jobs.put({"op": "quit"})

    def run_code(self, code: str, job_id: str | None) -> dict[str, Any]:
        """Execute in the kernel; stream its output when `job_id` is set (a silent run
        otherwise: saving and restoring)."""
        msg_id = self.kc.execute(code, silent=job_id is None, store_history=job_id is not None,
                                 allow_stdin=False, stop_on_error=False)
        error: dict[str, Any] | None = None
        while True:
            try:
                msg = self.kc.get_iopub_msg(timeout=1.0)
            except queue.Empty:
                if not self.km.is_alive():
                    send({"ev": "died"})
                    sys.exit(3)
                continue
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream" and job_id is not None:
                send({"ev": "stream", "id": job_id, "name": content.get("name", "stdout"),
                      "text": content.get("text", "")})
            elif kind in ("execute_result", "display_data") and job_id is not None:
                send({"ev": "result", "id": job_id, "data": mime_bundle(content.get("data", {})),
                      "main": kind == "execute_result"})
            elif kind == "error":
                error = {"name": str(content.get("ename", ""))[:200],
                         "value": str(content.get("evalue", ""))[:VALUE_MAX],
                         "traceback": [ANSI.sub("", t)[:VALUE_MAX]
                                       for t in content.get("traceback", [])[-TRACEBACK_MAX:]]}
            elif kind == "status" and content.get("execution_state") == "idle":
                break
        count = None
        while True:  # the reply carries the execution count
            try:
                reply = self.kc.get_shell_msg(timeout=5.0)
            except queue.Empty:
                break
            if reply.get("parent_header", {}).get("msg_id") == msg_id:
                count = reply["content"].get("execution_count")
                if error is None and reply["content"].get("status") == "error":
                    content = reply["content"]
                    error = {"name": str(content.get("ename", ""))[:200],
                             "value": str(content.get("evalue", ""))[:VALUE_MAX], "traceback": []}
                break
        return {"status": "error" if error else "ok", "error": error, "execution_count": count}

    def meta(self) -> dict[str, Any]:
        try:
            with open(os.path.join(STATE_DIR, "meta.json")) as f:
                value = json.load(f)
            return value if isinstance(value, dict) else {}
        except (OSError, ValueError):
            return {}

    def serve(self) -> None:
        threading.Thread(target=self.read_stdin, daemon=True).start()
        send({"ev": "ready"})
        state = os.path.join(STATE_DIR, "state.pkl")
        meta = os.path.join(STATE_DIR, "meta.json")
        while True:
            job = self.jobs.get()
            op = job.get("op")
            if op == "quit":  # stdin ended: the server's attach went (killed); keep the names
                self.run_code(SAVE_CODE % (state, meta), None)
                return
            if op == "exec":
                done = self.run_code(str(job.get("code", "")), str(job.get("id", "")))
                send({"ev": "done", "id": job.get("id"), **done})
            elif op == "save":
                done = self.run_code(SAVE_CODE % (state, meta), None)
                info = self.meta()
                send({"ev": "saved", "saved": info.get("saved", []),
                      "lost": info.get("lost", []), "error": done["error"]})
            elif op == "restore":
                if not os.path.exists(state):
                    send({"ev": "restored", "restored": [], "lost": []})
                    continue
                done = self.run_code(RESTORE_CODE % (state, meta), None)
                info = self.meta()
                if done["error"] is not None:  # nothing could be read: all of it is lost
                    info = {"restored": [], "lost": info.get("saved", []) + info.get("lost", [])}
                    try:
                        os.unlink(state)
                    except OSError:
                        pass
                send({"ev": "restored", "restored": info.get("restored", []),
                      "lost": info.get("lost", [])})


def main() -> None:
    try:
        runner = Runner()
    except Exception as exc:
        print(f"the kernel did not start: {exc}", file=sys.stderr, flush=True)
        sys.exit(2)
    try:
        runner.serve()
    finally:
        runner.km.shutdown_kernel(now=True)


if __name__ == "__main__":
    main()
