"""One definition of each API call, two clients: `@call` and `@stream` turn a method that
builds a request (`Call[T]`, `Stream[T]`) into a method of `NaviClient` (answering `T`, or an
`Iterator[T]`) and of `AsyncNaviClient` (a coroutine answering `T`, or an `AsyncIterator[T]`).

The methods they make are real functions with the builder's own signature (its parameters,
defaults and docstring; the return annotation the client's): `help(NaviClient.exec)`,
`inspect.signature` and editors show them. Type checkers read the same through the
overloads of `__get__`.
"""

from __future__ import annotations

import functools
import inspect
import types
import typing
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

from navi_client.calls import Call, Stream

T = TypeVar("T")
P = ParamSpec("P")


class SyncSender:
    """The blocking client's side: `send` answers the value, `open_stream` iterates."""

    def send(self, call: Call[T]) -> T:
        raise NotImplementedError

    def open_stream(self, stream: Stream[T]) -> Iterator[T]:
        raise NotImplementedError


class AsyncSender:
    """The asyncio client's side: `send` is awaited, `open_stream` is iterated with `async for`."""

    async def send(self, call: Call[T]) -> T:
        raise NotImplementedError

    def open_stream(self, stream: Stream[T]) -> AsyncIterator[T]:
        raise NotImplementedError


def _signature(build: Callable[..., Any], answer: Callable[[Any], Any]) -> inspect.Signature:
    """The builder's signature with the client's return annotation (`answer` maps the
    builder's `Call[X]`/`Stream[X]` to what the method gives)."""
    sig = inspect.signature(build, eval_str=True)
    built = typing.get_args(sig.return_annotation)
    return sig.replace(return_annotation=answer(built[0]) if built else Any)


def _dress(fn: Callable[..., Any], build: Callable[..., Any], sig: inspect.Signature) -> None:
    functools.update_wrapper(fn, build, assigned=("__module__", "__name__", "__qualname__",
                                                  "__doc__"), updated=())
    fn.__signature__ = sig  # type: ignore[attr-defined]
    fn.__annotations__ = {**{name: p.annotation for name, p in sig.parameters.items()
                             if p.annotation is not inspect.Parameter.empty},
                          "return": sig.return_annotation}


class _Method(Generic[P, T]):
    """Common part of `call` and `stream`: the two functions, made once, on first use."""

    def __init__(self, build: Callable[Concatenate[Any, P], Any]) -> None:
        self.build = build
        self.__doc__ = build.__doc__
        self.__wrapped__ = build
        self._made: tuple[Callable[..., Any], Callable[..., Any]] | None = None

    def _make(self) -> tuple[Callable[..., Any], Callable[..., Any]]:
        raise NotImplementedError

    def _function(self, owner: type[Any]) -> Callable[..., Any]:
        if self._made is None:
            self._made = self._make()
        return self._made[1] if issubclass(owner, AsyncSender) else self._made[0]

    def _bind(self, obj: Any, owner: type[Any]) -> Any:
        fn = self._function(owner)
        return fn if obj is None else types.MethodType(fn, obj)


class call(_Method[P, T]):  # noqa: N801 (a decorator)
    """A method building a `Call[T]`: `NaviClient` answers `T`, `AsyncNaviClient` a
    coroutine of `T`."""

    def __init__(self, build: Callable[Concatenate[Any, P], Call[T]]) -> None:
        super().__init__(build)

    def _make(self) -> tuple[Callable[..., Any], Callable[..., Any]]:
        build = self.build

        def sync_method(self: SyncSender, *args: Any, **kwargs: Any) -> Any:
            return self.send(build(self, *args, **kwargs))

        async def async_method(self: AsyncSender, *args: Any, **kwargs: Any) -> Any:
            return await self.send(build(self, *args, **kwargs))

        sig = _signature(build, lambda t: t)
        _dress(sync_method, build, sig)
        _dress(async_method, build, sig)
        return sync_method, async_method

    @overload
    def __get__(self, obj: None, owner: type[Any]) -> Callable[..., Any]: ...

    @overload
    def __get__(self, obj: AsyncSender, owner: type[Any]) -> Callable[P, Awaitable[T]]: ...

    @overload
    def __get__(self, obj: SyncSender, owner: type[Any]) -> Callable[P, T]: ...

    def __get__(self, obj: Any, owner: type[Any]) -> Any:
        return self._bind(obj, owner)


class stream(_Method[P, T]):  # noqa: N801 (a decorator)
    """A method building a `Stream[T]`: `NaviClient` answers an `Iterator[T]`,
    `AsyncNaviClient` an `AsyncIterator[T]` (the request is sent when iteration starts)."""

    def __init__(self, build: Callable[Concatenate[Any, P], Stream[T]]) -> None:
        super().__init__(build)

    def _make(self) -> tuple[Callable[..., Any], Callable[..., Any]]:
        build = self.build

        def sync_method(self: SyncSender, *args: Any, **kwargs: Any) -> Any:
            return self.open_stream(build(self, *args, **kwargs))

        def async_method(self: AsyncSender, *args: Any, **kwargs: Any) -> Any:
            return self.open_stream(build(self, *args, **kwargs))

        _dress(sync_method, build, _signature(build, lambda t: Iterator[t]))  # type: ignore[valid-type]
        _dress(async_method, build, _signature(build, lambda t: AsyncIterator[t]))  # type: ignore[valid-type]
        return sync_method, async_method

    @overload
    def __get__(self, obj: None, owner: type[Any]) -> Callable[..., Any]: ...

    @overload
    def __get__(self, obj: AsyncSender, owner: type[Any]) -> Callable[P, AsyncIterator[T]]: ...

    @overload
    def __get__(self, obj: SyncSender, owner: type[Any]) -> Callable[P, Iterator[T]]: ...

    def __get__(self, obj: Any, owner: type[Any]) -> Any:
        return self._bind(obj, owner)
