"""A TCP proxy that puts a database farther away, as a managed database is (about 2 ms a
round trip): :func:`proxy` holds every reply ``delay`` seconds (the event loop's timer adds
its own fraction of a millisecond, so the whole delay sits on one side). It runs in a
thread of the benchmark's parent process, which only waits for its steps' processes."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    """Copy ``reader`` to ``writer``, each chunk ``delay`` seconds after it arrived, in order."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def send() -> None:
        while True:
            due, data = await queue.get()
            if not data:
                break
            await asyncio.sleep(max(0.0, due - loop.time()))
            writer.write(data)
            await writer.drain()
        writer.close()

    sender = asyncio.create_task(send())
    try:
        while data := await reader.read(65536):
            queue.put_nowait((loop.time() + delay, data))
    except ConnectionError:
        pass
    queue.put_nowait((0.0, b""))
    await sender


@contextlib.contextmanager
def proxy(host: str, port: int, delay: float) -> Iterator[int]:
    """A proxy to ``host:port`` on 127.0.0.1 for the duration of a block; its port."""

    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_connection(host, port)
        await asyncio.gather(
            pipe(client_r, server_w, 0.0),
            pipe(server_r, client_w, delay),
            return_exceptions=True,
        )

    loop = asyncio.new_event_loop()
    server = loop.run_until_complete(asyncio.start_server(handle, "127.0.0.1", 0))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        server.close()
