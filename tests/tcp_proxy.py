"""A round-robin TCP proxy on loopback, as the load balancer in front of the server replicas that
docs/operations.md prescribes: each new connection goes to the next backend that passes its health check
(``GET /healthz`` answered within a second, probed every ``check_every_s``), and to the next one again if
that refuses. A paused backend (SIGSTOP) accepts connections but never answers: its health check fails and
it is skipped, as a real balancer would; connections already open to it hang until it wakes or is cut.

``cut()`` drops every open connection at once (both directions, no goodbye): a network blip between the
agents and the servers. It runs its own asyncio loop in a thread; ``close()`` stops it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Sequence
from concurrent.futures import Future

from procs import free_port


class TcpProxy:
    def __init__(self, backends: Sequence[tuple[str, int]], check_every_s: float = 0.5) -> None:
        self.backends = list(backends)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.check_every_s = check_every_s
        self.healthy = [True] * len(self.backends)
        self.connections = 0  # accepted so far
        self.cuts = 0
        self._next = 0
        self._pipes: set[asyncio.StreamWriter] = set()
        self._loop = asyncio.new_event_loop()
        self._ready: Future[None] = Future()
        self._thread = threading.Thread(target=self._run, name="tcp-proxy", daemon=True)
        self._thread.start()
        self._ready.result(timeout=10)

    # -- control, from any thread ------------------------------------------------------------------------------
    def cut(self) -> int:
        """Drop every open connection; how many there were."""
        self.cuts += 1
        return asyncio.run_coroutine_threadsafe(self._cut(), self._loop).result(timeout=10)

    def close(self) -> None:
        if self._loop.is_running():
            asyncio.run_coroutine_threadsafe(self._drop_all(), self._loop).result(timeout=10)
            self._loop.call_soon_threadsafe(self._main.cancel)  # ends _serve, and with it the loop
        self._thread.join(timeout=10)
        self._loop.close()

    # -- the loop --------------------------------------------------------------------------------------------
    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._main = self._loop.create_task(self._serve())
        with contextlib.suppress(asyncio.CancelledError):
            self._loop.run_until_complete(self._main)

    async def _serve(self) -> None:
        server = await asyncio.start_server(self._accept, "127.0.0.1", self.port, backlog=512)
        self._checker = asyncio.create_task(self._check_forever())
        self._ready.set_result(None)
        try:
            await server.serve_forever()
        finally:
            server.close()

    async def _drop_all(self) -> None:
        """Every task but the server's own (the health checks, each connection's pumps) ended."""
        await self._cut()
        tasks = [t for t in asyncio.all_tasks() if t not in (asyncio.current_task(), self._main)]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _cut(self) -> int:
        pipes = list(self._pipes)
        for w in pipes:
            w.transport.abort()
        self._pipes.clear()
        return len(pipes) // 2

    async def _check_forever(self) -> None:
        while True:
            results = await asyncio.gather(*(self._check(h, p) for h, p in self.backends))
            self.healthy = list(results)
            await asyncio.sleep(self.check_every_s)

    @staticmethod
    async def _check(host: str, port: int) -> bool:
        try:
            async with asyncio.timeout(1.0):
                reader, writer = await asyncio.open_connection(host, port)
                try:
                    writer.write(f"GET /healthz HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
                    status = await reader.readline()
                finally:
                    writer.close()
            return status.split(b" ")[1:2] == [b"200"]
        except (OSError, TimeoutError):
            return False

    def _order(self) -> list[int]:
        """Backends to try for a new connection: round robin, healthy ones first."""
        n = len(self.backends)
        start = self._next
        self._next = (self._next + 1) % n
        ring = [(start + k) % n for k in range(n)]
        return [i for i in ring if self.healthy[i]] + [i for i in ring if not self.healthy[i]]

    async def _accept(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        self.connections += 1
        for i in self._order():
            host, port = self.backends[i]
            try:
                async with asyncio.timeout(2.0):
                    server_r, server_w = await asyncio.open_connection(host, port)
            except (OSError, TimeoutError):
                continue
            break
        else:
            client_w.transport.abort()
            return
        self._pipes |= {client_w, server_w}
        try:
            await asyncio.gather(self._pump(client_r, server_w), self._pump(server_r, client_w))
        except asyncio.CancelledError:
            pass  # closed: a connection handler ends quietly (asyncio logs a cancelled one as an error)
        finally:
            for w in (client_w, server_w):
                self._pipes.discard(w)
                w.transport.abort()

    @staticmethod
    async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            with contextlib.suppress(OSError):
                writer.write_eof()
