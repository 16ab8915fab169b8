"""Waiting for a server to be SERVING (grpc.health.v1)."""

from __future__ import annotations

import asyncio
import time

import grpc
import grpc.aio
from grpc_health.v1 import health_pb2


async def wait_serving(channel: grpc.aio.Channel, timeout: float = 10.0, service: str = "") -> None:
    """Polls the health check of ``service`` ("" = the whole server) until SERVING; raises
    TimeoutError with the last answer after ``timeout`` seconds."""
    check = channel.unary_unary(
        "/grpc.health.v1.Health/Check",
        request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
        response_deserializer=health_pb2.HealthCheckResponse.FromString,
    )
    deadline = time.monotonic() + timeout
    last = "no answer"
    while True:
        try:
            resp = await check(health_pb2.HealthCheckRequest(service=service), timeout=2)
            if resp.status == health_pb2.HealthCheckResponse.SERVING:
                return
            last = health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status)
        except grpc.aio.AioRpcError as e:
            last = f"{e.code().name}: {e.details()}"
        if time.monotonic() >= deadline:
            raise TimeoutError(f"health of {service!r} not SERVING after {timeout} s (last: {last})")
        await asyncio.sleep(0.1)
