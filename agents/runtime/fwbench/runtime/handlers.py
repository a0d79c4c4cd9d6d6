"""Registers AgentService on a gRPC server, answering bytes that are not a request with
INVALID_ARGUMENT. The generated registration (agent_pb2_grpc) lets gRPC parse each request,
and a request that does not parse then fails as INTERNAL ("Exception deserializing request!"),
the code the protocol keeps for errors of the framework. Here the parse is the handler's own:
what does not parse is the caller's error, and the status says so (found by the fuzz test,
tests/faults/test_fuzz.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import grpc
from google.protobuf.message import Message

from fwbench.agent.v1 import agent_pb2, agent_pb2_grpc

SERVICE = agent_pb2.DESCRIPTOR.services_by_name["AgentService"].full_name


class Unparsed:
    """A request whose bytes are not a `message` (`why`: the parser's error)."""

    def __init__(self, message: str, why: str) -> None:
        self.text = f"the request is not a valid {message}: {why or 'cannot be parsed'}"


def _parser(message: type[Message]) -> Callable[[bytes], Message | Unparsed]:
    def parse(data: bytes) -> Message | Unparsed:
        try:
            return message.FromString(data)
        except Exception as error:  # noqa: BLE001 (DecodeError, or whatever the parser raises)
            return Unparsed(message.DESCRIPTOR.name, " ".join(str(error).split())[:200])

    return parse


def _unary(method: Callable[[Any, grpc.ServicerContext], Message]) -> Callable[..., Message]:
    def handle(request: Message | Unparsed, context: grpc.ServicerContext) -> Message:
        if isinstance(request, Unparsed):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.text)
        return method(request, context)

    return handle


def _streaming(
    method: Callable[[Any, grpc.ServicerContext], Iterator[Message]],
) -> Callable[..., Iterator[Message]]:
    def handle(request: Message | Unparsed, context: grpc.ServicerContext) -> Iterator[Message]:
        if isinstance(request, Unparsed):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.text)
        yield from method(request, context)

    return handle


def _client_streaming(
    method: Callable[[Iterator[Any], grpc.ServicerContext], Message],
) -> Callable[..., Message]:
    def handle(requests: Iterator[Message | Unparsed], context: grpc.ServicerContext) -> Message:
        def parsed() -> Iterator[Message]:
            for request in requests:
                if isinstance(request, Unparsed):
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.text)
                yield request

        return method(parsed(), context)

    return handle


def add_agent_service(servicer: agent_pb2_grpc.AgentServiceServicer, server: grpc.Server) -> None:
    """What agent_pb2_grpc.add_AgentServiceServicer_to_server does, with tolerant parsing."""
    handlers = {
        "Describe": grpc.unary_unary_rpc_method_handler(
            _unary(servicer.Describe),
            request_deserializer=_parser(agent_pb2.DescribeRequest),
            response_serializer=agent_pb2.DescribeResponse.SerializeToString,
        ),
        "Run": grpc.unary_stream_rpc_method_handler(
            _streaming(servicer.Run),
            request_deserializer=_parser(agent_pb2.RunRequest),
            response_serializer=agent_pb2.RunResponse.SerializeToString,
        ),
        "Cancel": grpc.unary_unary_rpc_method_handler(
            _unary(servicer.Cancel),
            request_deserializer=_parser(agent_pb2.CancelRequest),
            response_serializer=agent_pb2.CancelResponse.SerializeToString,
        ),
        "InspectModel": grpc.unary_unary_rpc_method_handler(
            _unary(servicer.InspectModel),
            request_deserializer=_parser(agent_pb2.InspectModelRequest),
            response_serializer=agent_pb2.ModelSignature.SerializeToString,
        ),
        "ExportModel": grpc.unary_unary_rpc_method_handler(
            _unary(servicer.ExportModel),
            request_deserializer=_parser(agent_pb2.ExportModelRequest),
            response_serializer=agent_pb2.ExportModelResponse.SerializeToString,
        ),
        "UploadModel": grpc.stream_unary_rpc_method_handler(
            _client_streaming(servicer.UploadModel),
            request_deserializer=_parser(agent_pb2.ModelChunk),
            response_serializer=agent_pb2.UploadModelResponse.SerializeToString,
        ),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    server.add_registered_method_handlers(SERVICE, handlers)
