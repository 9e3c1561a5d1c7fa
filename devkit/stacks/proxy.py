"""A TCP forwarder on a local port, started when a test decides a dependency "comes up"."""

from __future__ import annotations

import asyncio
import contextlib
import threading


class TcpProxy:
    """Forwards 127.0.0.1:``port`` to ``target``, on its own thread and event loop (so it keeps
    forwarding while the test blocks). Until ``start()`` nothing listens on the port."""

    def __init__(self, port: int, target_host: str, target_port: int) -> None:
        self.port = port
        self.target = (target_host, target_port)
        self.connections = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def start(self) -> TcpProxy:
        self._thread.start()
        fut = asyncio.run_coroutine_threadsafe(self._listen(), self._loop)
        fut.result(timeout=10)
        return self

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.connections += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            self._tasks.discard(task)
            return
        try:
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        finally:
            self._tasks.discard(task)

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            with contextlib.suppress(OSError, RuntimeError):
                writer.close()

    def stop(self) -> None:
        if not self._thread.is_alive():
            return

        async def shutdown() -> None:
            if self._server is not None:
                self._server.close()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()
