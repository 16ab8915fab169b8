"""A TCP proxy for tests: forwards 127.0.0.1:<port> to a target, and can cut every connection
(both sockets closed at once), as a network failure between a worker and the server would, or
freeze them (nothing forwarded any more, the sockets left open: a black hole, no reset)."""

from __future__ import annotations

import asyncio
import contextlib

from jobwire.testing import free_port


class Proxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = free_port()
        self.connections = 0
        self._writers: set[asyncio.StreamWriter] = set()
        self._frozen: set[asyncio.StreamReader] = set()  # readers no longer forwarded
        self._readers: dict[asyncio.StreamWriter, asyncio.StreamReader] = {}
        self._server: asyncio.Server | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        self._writers |= {writer, up_writer}

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError, asyncio.CancelledError):
                while data := await src.read(65536):
                    if src in self._frozen:
                        await asyncio.Event().wait()  # swallow it, forever
                    dst.write(data)
                    await dst.drain()
            dst.close()

        self._readers[writer] = reader
        self._readers[up_writer] = up_reader

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        self._writers -= {writer, up_writer}
        self._readers.pop(writer, None)
        self._readers.pop(up_writer, None)

    def freeze(self) -> int:
        """Stops forwarding on every open connection (both ways), sockets left open; new
        connections are forwarded as usual. Returns how many connections were frozen."""
        readers = list(self._readers.values())
        self._frozen.update(readers)
        return len(readers) // 2

    def cut(self) -> int:
        """Closes both sockets of every open connection; returns how many sockets were closed."""
        cut = list(self._writers)
        for w in cut:
            w.transport.abort()
        self._writers.clear()
        return len(cut)

    async def close(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
