"""A session's long-lived work, each call written once for both clients: background
processes, stateful Python kernels, preview links to a process's port, and the questions
the agent asks its user (`ask_user`)."""

from __future__ import annotations

from navi_client.calls import Call, Stream, drop_none, exec_stream, many, nothing, one, session_path
from navi_client.endpoint import call, stream
from navi_client.models import ExecChunk
from navi_client.wire import (
    ExecOut,
    KernelInfoOut,
    KernelResultOut,
    PreviewOut,
    ProcessOut,
    ProcessOutputOut,
    QuestionOut,
    Signal,
)


class WorkAPI:
    """Processes, kernels, previews and questions of a session."""

    # ---- background processes ---------------------------------------------------------

    @call
    def start_process(self, session: str, command: str, *, cwd: str | None = None,
                      env: dict[str, str] | None = None, name: str | None = None,
                      ports: list[int] | None = None) -> Call[ProcessOut]:
        """Start `command` (a shell line) in a hardened container of its own, beside the
        session's files; `ports` (1024-65535) it will serve, reachable through previews.
        Past the profile's count: `RateLimitError` `quota_exceeded`."""
        return Call("POST", session_path(session, "processes"), one(ProcessOut),
                    json=drop_none(command=command, cwd=cwd, env=env, name=name, ports=ports))

    @call
    def list_processes(self, session: str) -> Call[list[ProcessOut]]:
        """The session's processes, oldest first (ended ones too, and sub-agents with
        `kind: "agent"`)."""
        return Call("GET", session_path(session, "processes"), many(ProcessOut))

    @call
    def get_process(self, session: str, process: str) -> Call[ProcessOut]:
        """One process (its state, and `exit_code` and `reason` once it ended)."""
        return Call("GET", session_path(session, "processes", process), one(ProcessOut))

    @call
    def process_output(self, session: str, process: str, *, since: int = 0
                       ) -> Call[ProcessOutputOut]:
        """Its combined stdout+stderr from byte offset `since` (at most 1 MiB an answer):
        pass the answer's `next` to read on."""
        return Call("GET", session_path(session, "processes", process, "output"),
                    one(ProcessOutputOut), params={"since": since})

    @call
    def process_input(self, session: str, process: str, data: str, *, eof: bool = False
                      ) -> Call[None]:
        """Write `data` to its stdin; with `eof`, then close its stdin."""
        return Call("POST", session_path(session, "processes", process, "input"), nothing,
                    json={"data": data, "eof": eof})

    @call
    def signal_process(self, session: str, process: str, signal: Signal) -> Call[None]:
        """Send it `INT`, `TERM`, `KILL` or `HUP`."""
        return Call("POST", session_path(session, "processes", process, "signal"), nothing,
                    json={"signal": signal})

    @call
    def stop_process(self, session: str, process: str) -> Call[None]:
        """Stop it (TERM, KILL after 5 s); its record stays listed (`reason: "stopped"`)."""
        return Call("DELETE", session_path(session, "processes", process), nothing)

    # ---- kernels ----------------------------------------------------------------------

    @call
    def kernel_execute(self, session: str, code: str, *, kernel: str = "default",
                       timeout_s: float | None = None) -> Call[KernelResultOut]:
        """Run Python `code` in the session's kernel `kernel` (names, imports and functions
        persist between executes of one kernel); a failing cell is an answer with `error`."""
        return Call("POST", session_path(session, "kernels", kernel, "execute"),
                    one(KernelResultOut), json=drop_none(code=code, timeout_s=timeout_s))

    @stream
    def kernel_execute_stream(self, session: str, code: str, *, kernel: str = "default",
                              timeout_s: float | None = None) -> Stream[ExecChunk | ExecOut]:
        """`kernel_execute`, streamed as `exec_stream` is: the output as it comes
        (`ExecChunk`), then the call's result (`ExecOut`, last: `ok`, `stdout`, `stderr`;
        `results` and `error` are `kernel_execute`'s)."""
        return exec_stream(session_path(session, "kernels", kernel, "execute"),
                           drop_none(code=code, timeout_s=timeout_s))

    @call
    def list_kernels(self, session: str) -> Call[list[KernelInfoOut]]:
        """The session's kernels, running or saved."""
        return Call("GET", session_path(session, "kernels"), many(KernelInfoOut))

    @call
    def delete_kernel(self, session: str, kernel: str = "default") -> Call[None]:
        """Stop a kernel and forget its state (`NotFoundError` when there is none)."""
        return Call("DELETE", session_path(session, "kernels", kernel), nothing)

    # ---- previews ---------------------------------------------------------------------

    @call
    def create_preview(self, session: str, port: int, *, expires_in_s: int | None = None
                       ) -> Call[PreviewOut]:
        """A link to `port` of a running process of the session that works without a token
        (an origin of its own) for `expires_in_s` (default 1 h, at most 24 h)."""
        return Call("POST", session_path(session, "previews"), one(PreviewOut),
                    json=drop_none(port=port, expires_in_s=expires_in_s))

    @call
    def list_previews(self, session: str) -> Call[list[PreviewOut]]:
        """The session's live preview links."""
        return Call("GET", session_path(session, "previews"), many(PreviewOut))

    @call
    def delete_preview(self, session: str, preview: str) -> Call[None]:
        """Revoke a preview link."""
        return Call("DELETE", session_path(session, "previews", preview), nothing)

    # ---- questions --------------------------------------------------------------------

    @call
    def list_questions(self, session: str) -> Call[list[QuestionOut]]:
        """The agent's pending questions in the session (`ask_user`)."""
        return Call("GET", session_path(session, "questions"), many(QuestionOut))

    @call
    def answer_question(self, session: str, question: str, answer: str) -> Call[QuestionOut]:
        """Answer a pending question (one of its `options` when it has some, else 422); a
        second answer is `ConflictError`."""
        return Call("POST", session_path(session, "questions", question), one(QuestionOut),
                    json={"answer": answer})
