"""Channels to a jobwire server: plaintext, TLS, mTLS, and a bearer token on every call.

One place decides the credentials and the channel options, for the asyncio channels the SDK
runs on (``grpc.aio``) and for the blocking ones of :mod:`jobwire.sync`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import grpc
import grpc.aio

PathOrBytes = bytes | str | os.PathLike[str]

# gRPC keepalive: an HTTP/2 PING every 10 s, the connection counted dead when the answer takes
# over 5 s, also while no call is open, so a half-open TCP connection (a NAT that forgot it, a
# peer that vanished, a frozen server) is noticed within 15 s rather than at the OS's TCP
# timeout. The jobwire server (hyper/h2) answers pings without a rate limit (no GOAWAY
# "too_many_pings"); a proxy in between may have one (e.g. a gRPC server's 5 min default).
DEFAULT_KEEPALIVE = 10.0
"""Seconds between keepalive pings."""
DEFAULT_KEEPALIVE_TIMEOUT = 5.0
"""Seconds a keepalive ping may go unanswered before the connection is closed."""


@dataclass(frozen=True)
class Keepalive:
    """The channel's HTTP/2 keepalive (``Client(keepalive=...)``).

    ``interval``: seconds between PINGs (at least 1). ``timeout``: seconds a PING may go
    unanswered before the connection is closed and its calls fail UNAVAILABLE (at least 1; the
    worker then reconnects). ``without_calls``: also ping while no call is open. A frozen or
    vanished server is noticed within ``interval + timeout`` (15 s by default).
    """

    interval: float = DEFAULT_KEEPALIVE
    timeout: float = DEFAULT_KEEPALIVE_TIMEOUT
    without_calls: bool = True

    def __post_init__(self) -> None:
        if not (self.interval >= 1 and self.timeout >= 1):
            raise ValueError(f"keepalive interval and timeout must be at least 1 s, got {self}")

    @classmethod
    def of(cls, value: float | Keepalive) -> Keepalive:
        """``value`` as a Keepalive: a number is the interval, with a timeout of half that
        (at least 1 s)."""
        if isinstance(value, Keepalive):
            return value
        return cls(interval=max(1.0, value), timeout=max(1.0, value / 2))


KEEPALIVE_OPTIONS: list[tuple[str, int | str]] = [
    ("grpc.http2.max_pings_without_data", 0),
    # gRPC's own reconnect backoff (1 s growing to 120 s by default) would outlast a server
    # restart by far; these bounds match the worker's stream backoff (0.5 s to 30 s).
    ("grpc.initial_reconnect_backoff_ms", 500),
    ("grpc.min_reconnect_backoff_ms", 500),
    ("grpc.max_reconnect_backoff_ms", 30_000),
]


def _read(value: PathOrBytes | None) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    return Path(value).read_bytes()


@dataclass(frozen=True)
class TLS:
    """TLS settings of a :class:`~jobwire.Client`.

    ``ca``: the PEM certificates of the CA that signed the server's certificate (a path or the
    bytes); ``None`` uses the system's roots. ``cert`` and ``key``: a client certificate and its
    key, for a server that requires one (``--tls-client-ca``, mTLS). ``server_name``: the name the
    server's certificate must have, when it differs from the host dialled.
    """

    ca: PathOrBytes | None = None
    cert: PathOrBytes | None = None
    key: PathOrBytes | None = None
    server_name: str | None = None

    def __post_init__(self) -> None:
        if (self.cert is None) != (self.key is None):
            raise ValueError("a client certificate needs both cert and key")


def read_token(path: str | os.PathLike[str]) -> str:
    """The content of a token file (``jw_<id>_<secret>``, from ``jobwire token new``), stripped."""
    return Path(path).read_text().strip()


def credentials(token: str | None, tls: TLS | None) -> grpc.ChannelCredentials | None:
    """The channel credentials for ``token`` and ``tls``; ``None`` means a plaintext channel.

    The token travels as ``authorization: Bearer <token>`` (gRPC's access-token call
    credentials). Without TLS, gRPC's local credentials carry it: gRPC sends call credentials in
    clear text only to a loopback address, so a token cannot leak onto a network this way.
    """
    call = grpc.access_token_call_credentials(token) if token else None
    if tls is None:
        if call is None:
            return None
        local = grpc.local_channel_credentials(grpc.LocalConnectionType.LOCAL_TCP)
        return grpc.composite_channel_credentials(local, call)
    channel = grpc.ssl_channel_credentials(
        root_certificates=_read(tls.ca),
        private_key=_read(tls.key),
        certificate_chain=_read(tls.cert),
    )
    return grpc.composite_channel_credentials(channel, call) if call else channel


def options(tls: TLS | None, keepalive: float | Keepalive = DEFAULT_KEEPALIVE) -> list[tuple[str, int | str]]:
    """Channel options: keepalive, reconnect backoff, the TLS name override."""
    out = keepalive_options(Keepalive.of(keepalive)) + KEEPALIVE_OPTIONS
    if tls is not None and tls.server_name:
        out.append(("grpc.ssl_target_name_override", tls.server_name))
    return out


def keepalive_options(k: Keepalive) -> list[tuple[str, int | str]]:
    """gRPC core's options for ``k``."""
    ms = round(k.interval * 1000)
    timeout = round(k.timeout * 1000)
    # gRPC core times out unanswered pings by grpc.http2.ping_timeout_ms (1 min by default),
    # not only by the keepalive timeout: both are set, or a silent peer is kept for a minute.
    return [
        ("grpc.keepalive_time_ms", ms),
        ("grpc.keepalive_timeout_ms", timeout),
        ("grpc.http2.ping_timeout_ms", timeout),
        ("grpc.keepalive_permit_without_calls", int(k.without_calls)),
    ]


def aio_channel(
    target: str,
    token: str | None = None,
    tls: TLS | None = None,
    keepalive: float | Keepalive = DEFAULT_KEEPALIVE,
) -> grpc.aio.Channel:
    """An asyncio channel to jobwire at ``target`` (``HOST:PORT``); ``keepalive``: see
    :class:`Keepalive` (a number is the interval in seconds)."""
    creds = credentials(token, tls)
    opts = options(tls, keepalive)
    if creds is None:
        return grpc.aio.insecure_channel(target, options=opts)
    return grpc.aio.secure_channel(target, creds, options=opts)


def sync_channel(
    target: str,
    token: str | None = None,
    tls: TLS | None = None,
    keepalive: float | Keepalive = DEFAULT_KEEPALIVE,
) -> grpc.Channel:
    """A blocking channel to jobwire at ``target`` (``HOST:PORT``), for the generated stubs."""
    creds = credentials(token, tls)
    if creds is None:
        return grpc.insecure_channel(target, options=options(tls, keepalive))
    return grpc.secure_channel(target, creds, options=options(tls, keepalive))
