"""A private PgBouncer in transaction pooling mode, in front of a PostgreSQL URL.

``with PgBouncer(url) as bouncer: bouncer.url`` starts Debian's ``pgbouncer`` on a
free local port with a generated config and auth file in a temporary directory,
and stops it on exit. The upstream server must accept the user without a password
(``trust``), as the tests' local server does.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

CANDIDATES = ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer")


class PgBouncerError(RuntimeError):
    """PgBouncer is missing or did not start."""


def binary() -> str | None:
    """The ``pgbouncer`` executable, or None where it is not installed."""
    found = shutil.which("pgbouncer")
    return found or next((c for c in CANDIDATES if os.access(c, os.X_OK)), None)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _config(upstream: Any, port: int, tmp: Path) -> str:
    return "\n".join(
        [
            "[databases]",
            f"* = host={upstream.hostname or '127.0.0.1'} port={upstream.port or 5432}",
            "[pgbouncer]",
            "listen_addr = 127.0.0.1",
            f"listen_port = {port}",
            "unix_socket_dir =",
            "auth_type = trust",
            f"auth_file = {tmp / 'userlist.txt'}",
            "pool_mode = transaction",
            "max_client_conn = 200",
            "default_pool_size = 20",
            "ignore_startup_parameters = extra_float_digits,options",
            f"logfile = {tmp / 'pgbouncer.log'}",
            f"pidfile = {tmp / 'pgbouncer.pid'}",
            "",
        ]
    )


class PgBouncer:
    """A ``pgbouncer`` process of its own, transaction pooling, on a free port."""

    def __init__(self, upstream_url: str) -> None:
        self.upstream = urlsplit(upstream_url)
        self.user = self.upstream.username or "postgres"
        self.dbname = self.upstream.path.lstrip("/")
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.tmp: tempfile.TemporaryDirectory[str] | None = None

    @property
    def url(self) -> str:
        """The database URL through PgBouncer."""
        return f"postgres://{self.user}@127.0.0.1:{self.port}/{self.dbname}"

    @property
    def log(self) -> str:
        path = Path(self.tmp.name if self.tmp else "") / "pgbouncer.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def __enter__(self) -> PgBouncer:
        exe = binary()
        if exe is None:
            raise PgBouncerError("pgbouncer is not installed (apt-get install pgbouncer)")
        self.tmp = tempfile.TemporaryDirectory(prefix="squad-memory-pgbouncer-")
        tmp = Path(self.tmp.name)
        self.port = free_port()
        (tmp / "userlist.txt").write_text(f'"{self.user}" ""\n')
        (tmp / "pgbouncer.ini").write_text(_config(self.upstream, self.port, tmp))
        cmd = [exe, str(tmp / "pgbouncer.ini")]
        if os.geteuid() == 0:  # PgBouncer refuses to run as root
            os.chmod(tmp, 0o777)
            cmd[1:1] = ["-u", "postgres"]
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
        )
        self._wait_ready(15)
        return self

    def _wait_ready(self, timeout: float) -> None:
        import psycopg

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                break
            try:
                psycopg.connect(self.url.replace("postgres://", "postgresql://", 1)).close()
                return
            except psycopg.OperationalError:
                time.sleep(0.1)
        exited = self.proc is not None and self.proc.poll() is not None
        err = ""
        if exited and self.proc is not None and self.proc.stderr is not None:
            err = self.proc.stderr.read().decode(errors="replace")
        self.__exit__()
        raise PgBouncerError(f"pgbouncer did not start: {err.strip()} {self.log[-2000:]}".strip())

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None and self.proc.stderr:
            self.proc.stderr.close()
        if self.tmp is not None:
            self.tmp.cleanup()
            self.tmp = None
