"""A real TCP proxy in front of a broker that can hang: it accepts connections and never
answers, then recovers and forwards new connections to the broker."""

from __future__ import annotations

import contextlib
import socket
import threading


class HangingProxy:
    """Listens on 127.0.0.1 (``port``). While :attr:`hanging`, a connection is accepted
    and held silent for good, as a broker that stopped answering holds it; once
    :meth:`recover` is called, new connections are forwarded to ``target``."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target, self.hanging = target, True
        self.server = socket.create_server(("127.0.0.1", 0), backlog=128)
        self.server.settimeout(0.1)
        self.port: int = self.server.getsockname()[1]
        self.sockets: list[socket.socket] = []
        self.accepted = {"held": 0, "forwarded": 0}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True, name="hanging-proxy")
        self.thread.start()

    def recover(self) -> None:
        self.hanging = False

    def close(self) -> None:
        self.stop.set()
        self.thread.join(2)
        for sock in [self.server, *self.sockets]:
            sock.close()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                client = self.server.accept()[0]
            except OSError:
                continue
            self.sockets.append(client)
            if self.hanging:
                self.accepted["held"] += 1
                continue
            self.accepted["forwarded"] += 1
            upstream = socket.create_connection(self.target, timeout=5)
            upstream.settimeout(None)
            self.sockets.append(upstream)
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pump, args=(src, dst), daemon=True).start()


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (src, dst):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
