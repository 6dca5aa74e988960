"""`navi_client`'s methods show their real parameters: `inspect.signature` and `help()` give
each call's own parameters and a typed answer (never `(*args, **kwargs) -> Any`), the same
for `NaviClient` and `AsyncNaviClient` (one definition of each call), and the async ones
are coroutine functions or async iterators."""

from __future__ import annotations

import inspect
import pydoc
import typing
from collections.abc import AsyncIterator, Iterator

import pytest
from navi_client import AsyncNaviClient, NaviClient
from navi_client.calls import Call, Stream
from navi_client.wire import (
    ExecOut,
    KernelResultOut,
    PreviewOut,
    ProcessOut,
    QuestionOut,
    SnapshotOut,
)

from runtime import client as runtime_client

STREAMS = {"exec_stream", "events", "kernel_execute_stream"}
WANTED = {  # issue 41: snapshots, processes, kernels, previews and questions
    "create_snapshot", "list_snapshots", "restore_snapshot", "delete_snapshot", "fork_session",
    "start_process", "list_processes", "get_process", "process_output", "process_input",
    "signal_process", "stop_process", "kernel_execute", "kernel_execute_stream", "list_kernels",
    "delete_kernel",
    "create_preview", "list_previews", "delete_preview", "list_questions", "answer_question",
}
NOT_CALLS = {"send", "open_stream", "close", "aclose"}


def api_methods(cls: type) -> list[str]:
    return sorted(name for name in dir(cls) if not name.startswith("_")
                  and callable(getattr(cls, name)) and name not in NOT_CALLS)


def test_both_clients_offer_the_same_calls_including_the_new_ones() -> None:
    assert api_methods(NaviClient) == api_methods(AsyncNaviClient)
    assert WANTED <= set(api_methods(NaviClient))


@pytest.mark.parametrize("cls", [NaviClient, AsyncNaviClient])
def test_every_method_has_its_real_signature(cls: type) -> None:
    for name in api_methods(cls):
        sig = inspect.signature(getattr(cls, name))
        kinds = {p.kind for p in sig.parameters.values()}
        assert not kinds & {inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD}, (
            f"{cls.__name__}.{name}{sig}")
        assert list(sig.parameters)[0] == "self", name
        assert all(p.annotation is not inspect.Parameter.empty
                   for p in list(sig.parameters.values())[1:]), name
        answer = sig.return_annotation
        assert answer not in (inspect.Signature.empty, typing.Any), f"{cls.__name__}.{name}"
        # what the client answers, resolved: not the builder's `Call[...]`/`Stream[...]`
        assert not isinstance(answer, str) and typing.get_origin(answer) not in (Call, Stream), (
            f"{cls.__name__}.{name} -> {answer}")
        assert getattr(cls, name).__doc__, name


def test_sync_and_async_share_parameters_and_differ_only_in_how_they_answer() -> None:
    for name in api_methods(NaviClient):
        sync, aio = getattr(NaviClient, name), getattr(AsyncNaviClient, name)
        s_sig, a_sig = inspect.signature(sync), inspect.signature(aio)
        assert s_sig.parameters == a_sig.parameters, name
        if name in STREAMS:
            assert typing.get_origin(s_sig.return_annotation) is Iterator
            assert typing.get_origin(a_sig.return_annotation) is AsyncIterator
            assert not inspect.iscoroutinefunction(aio)
        else:
            assert s_sig.return_annotation == a_sig.return_annotation, name
            assert inspect.iscoroutinefunction(aio) and not inspect.iscoroutinefunction(sync)


def test_answers_are_the_api_models() -> None:
    answers = {name: inspect.signature(getattr(NaviClient, name)).return_annotation
               for name in api_methods(NaviClient)}
    assert answers["exec"] is ExecOut
    assert answers["create_snapshot"] is SnapshotOut
    assert answers["list_processes"] == list[ProcessOut]
    assert answers["kernel_execute"] is KernelResultOut
    assert answers["create_preview"] is PreviewOut
    assert answers["answer_question"] is QuestionOut
    assert answers["stop_process"] is type(None) or answers["stop_process"] is None


def test_bound_methods_and_help_show_the_parameters() -> None:
    with NaviClient("http://127.0.0.1:9", "t") as navi:
        bound = inspect.signature(navi.start_process)
    assert str(bound) == ("(session: str, command: str, *, cwd: str | None = None, "
                          "env: dict[str, str] | None = None, name: str | None = None, "
                          "ports: list[int] | None = None) -> navi_client.wire.ProcessOut")
    shown = pydoc.plain(pydoc.render_doc(NaviClient.exec))
    assert "exec(self, session: str, tool: str, args:" in shown
    assert "-> navi_client.wire.ExecOut" in shown
    assert "*args" not in shown and "Run `tool` with `args`" in shown


def test_runtime_client_is_navi_client() -> None:
    """Existing imports keep working: `runtime.client` re-exports the distribution's names."""
    import navi_client

    assert runtime_client.NaviClient is NaviClient
    assert set(runtime_client.__all__) == set(navi_client.__all__)
    assert all(getattr(runtime_client, n) is getattr(navi_client, n) for n in navi_client.__all__)
