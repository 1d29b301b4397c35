"""Requests whose bytes are not the method's message: INVALID_ARGUMENT and one log line.

grpcio runs the request deserializer before the servicer, and a DecodeError
there becomes UNKNOWN for the client and an ERROR with a traceback in the log.
This interceptor gives every method (ours, health, reflection) a deserializer
that hands a Malformed marker to a wrapper of the method instead, which
refuses it before the servicer sees it.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

import grpc

# Every method's requests and responses pass through here, whatever their
# types; grpc's classes take no type arguments at run time.
if TYPE_CHECKING:
    from typing import TypeAlias

    Context: TypeAlias = grpc.aio.ServicerContext[Any, Any]
    Handler: TypeAlias = grpc.RpcMethodHandler[Any, Any]
    _Interceptor: TypeAlias = grpc.aio.ServerInterceptor[Any, Any]
else:
    _Interceptor = grpc.aio.ServerInterceptor

log = logging.getLogger("unreachabled")


class Malformed:
    def __init__(self, size: int, error: Exception) -> None:
        self.size = size
        self.reason = (str(error).splitlines() or [type(error).__name__])[0]


def _lenient(deserializer: Callable[[bytes], Any] | None) -> Callable[[bytes], Any]:
    def parse(data: bytes) -> Any:
        if deserializer is None:
            return data
        try:
            return deserializer(data)
        except Exception as e:  # noqa: BLE001 - whatever it raises, the bytes were bad
            return Malformed(len(data), e)

    return parse


async def _refuse(method: str, request: Malformed, context: Context) -> None:
    log.warning(
        "malformed request to %s from %s (%d bytes): %s",
        method,
        context.peer(),
        request.size,
        request.reason,
    )
    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"malformed request: {request.reason}")


def _unary(method: str, behavior: Callable[..., Any]) -> Callable[..., Any]:
    if inspect.isasyncgenfunction(behavior):

        async def stream(request: Any, context: Context) -> AsyncIterator[Any]:
            if isinstance(request, Malformed):
                await _refuse(method, request, context)
            async for response in behavior(request, context):
                yield response

        return stream

    async def call(request: Any, context: Context) -> Any:
        if isinstance(request, Malformed):
            await _refuse(method, request, context)
        return await behavior(request, context)

    return call


def _streaming(method: str, behavior: Callable[..., Any]) -> Callable[..., Any]:
    async def checked(requests: AsyncIterator[Any], context: Context) -> AsyncIterator[Any]:
        async for request in requests:
            if isinstance(request, Malformed):
                await _refuse(method, request, context)
            yield request

    if inspect.isasyncgenfunction(behavior):

        async def stream(requests: Any, context: Context) -> AsyncIterator[Any]:
            async for response in behavior(checked(requests, context), context):
                yield response

        return stream

    async def call(requests: Any, context: Context) -> Any:
        return await behavior(checked(requests, context), context)

    return call


def _is_async(behavior: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(behavior) or inspect.isasyncgenfunction(behavior)


def guard(handler: Handler, method: str) -> Handler:
    """`handler` with malformed requests refused; synchronous handlers as they are."""
    parse = _lenient(handler.request_deserializer)
    serialize = handler.response_serializer
    if handler.unary_unary and _is_async(handler.unary_unary):
        return grpc.unary_unary_rpc_method_handler(
            _unary(method, handler.unary_unary), parse, serialize
        )
    if handler.unary_stream and _is_async(handler.unary_stream):
        return grpc.unary_stream_rpc_method_handler(
            _unary(method, handler.unary_stream), parse, serialize
        )
    if handler.stream_unary and _is_async(handler.stream_unary):
        return grpc.stream_unary_rpc_method_handler(
            _streaming(method, handler.stream_unary), parse, serialize
        )
    if handler.stream_stream and _is_async(handler.stream_stream):
        return grpc.stream_stream_rpc_method_handler(
            _streaming(method, handler.stream_stream), parse, serialize
        )
    return handler


class RefuseMalformed(_Interceptor):
    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        return guard(handler, handler_call_details.method)
