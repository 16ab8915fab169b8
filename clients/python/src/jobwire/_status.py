"""The google.rpc ErrorInfo the server attaches to every error (``grpc-status-details-bin``),
read without the googleapis protos: a google.rpc.Status holds its details as ``Any`` messages
(field 3), and an ErrorInfo is ``reason`` (1), ``domain`` (2) and a ``metadata`` map (3)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import cast

import grpc
import grpc.aio

_ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7


def _fields(buf: bytes) -> Iterator[tuple[int, bytes]]:
    """The length-delimited fields of one message, as (number, bytes); others are skipped."""
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            _, i = _varint(buf, i)
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        elif wire == 2:
            n, i = _varint(buf, i)
            yield number, buf[i : i + n]
            i += n
        else:
            raise ValueError(f"wire type {wire}")


def error_info(e: grpc.aio.AioRpcError | grpc.RpcError) -> tuple[str, dict[str, str]] | None:
    """The ErrorInfo ``(reason, metadata)`` of a failed call, or None when it carries none."""
    # grpc.aio.Metadata iterates as (key, value) pairs (the stubs type it otherwise).
    trailers = cast(
        Iterable[tuple[str, str | bytes]] | None,
        e.trailing_metadata() if hasattr(e, "trailing_metadata") else None,
    )
    for key, value in trailers or ():
        if key != "grpc-status-details-bin" or not isinstance(value, bytes):
            continue
        try:
            for number, detail in _fields(value):
                if number != 3:
                    continue
                parts = dict(_fields(detail))
                if parts.get(1, b"").decode() != _ERROR_INFO:
                    continue
                reason, metadata = "", {}
                for n, v in _fields(parts.get(2, b"")):
                    if n == 1:
                        reason = v.decode()
                    elif n == 3:
                        entry = dict(_fields(v))
                        metadata[entry.get(1, b"").decode()] = entry.get(2, b"").decode()
                return reason, metadata
        except (IndexError, ValueError, UnicodeDecodeError):
            return None
    return None


def not_replicated_job_id(e: grpc.aio.AioRpcError | grpc.RpcError) -> str | None:
    """The id of the job an Enqueue made on the Redis master though too few replicas
    acknowledged it (UNAVAILABLE, reason NOT_REPLICATED, ErrorInfo metadata ``job_id``), or
    None for any other error. Retrying with this ``job_id`` finds that job instead of creating
    another."""
    if not hasattr(e, "code") or e.code() != grpc.StatusCode.UNAVAILABLE:
        return None
    info = error_info(e)
    if info is None or info[0] != "NOT_REPLICATED":
        return None
    return info[1].get("job_id") or None
