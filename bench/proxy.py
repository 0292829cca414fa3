"""A TCP proxy that puts a database farther away, as a managed database is (about 2 ms a
round trip): ``python -m bench.proxy PORT TARGET_HOST TARGET_PORT DELAY`` holds every reply
DELAY seconds (the event loop's timer adds its own fraction of a millisecond, so the whole
delay sits on one side). It listens on 127.0.0.1 and stops when its parent closes its
standard input."""

from __future__ import annotations

import asyncio
import sys


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


async def serve(port: int, host: str, target: int, delay: float) -> None:
    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_connection(host, target)
        await asyncio.gather(
            pipe(client_r, server_w, 0.0),
            pipe(server_r, client_w, delay),
            return_exceptions=True,
        )

    server = await asyncio.start_server(handle, "127.0.0.1", port)
    print("ready", flush=True)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.read)  # until the parent closes the pipe
    server.close()


if __name__ == "__main__":
    asyncio.run(serve(int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4])))
