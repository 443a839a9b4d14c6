"""A real PostgreSQL server for the tests and the store benchmark: Debian's `postgresql`
package (installed by .ci/run), started in a temporary folder on 127.0.0.1 and a free port.

PostgreSQL refuses to run as root, so as root the server runs as the `postgres` user that
the package creates (setpriv drops to it); any other user runs it as itself.
"""
from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

ROLE = "llmd"


def _binary(name: str) -> str | None:
    """Debian keeps the server programs in /usr/lib/postgresql/VERSION/bin (newest wins)."""
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), key=lambda p: int(p.split("/")[4]))
    return found[-1] if found else shutil.which(name)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresServer:
    """A running server; `new_database()` gives each test a database of its own."""

    def __init__(self, folder: Path, port: int, proc: subprocess.Popen):
        self.folder, self.port, self.proc = folder, port, proc
        self._databases = 0

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{ROLE}@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        import psycopg

        self._databases += 1
        name = f"t{self._databases}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # PostgreSQL's fast shutdown
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


def start_postgres(durable: bool = False) -> PostgresServer:
    """Start a server, or raise RuntimeError saying why it cannot run here. `durable=False`
    turns fsync off (tests); the benchmark keeps PostgreSQL's defaults."""
    try:
        import psycopg
    except ImportError:
        raise RuntimeError("psycopg is not installed (pip install 'llm-dissect[postgres]')") from None
    initdb, postgres = _binary("initdb"), _binary("postgres")
    if not (initdb and postgres):
        raise RuntimeError("PostgreSQL's initdb/postgres are not installed (apt-get install postgresql)")
    as_user: list[str] = []
    folder = Path(tempfile.mkdtemp(prefix="llmd-pg-"))
    if os.geteuid() == 0:
        try:
            user = pwd.getpwnam("postgres")
        except KeyError:
            shutil.rmtree(folder)
            raise RuntimeError("running as root and there is no postgres user to run the server as") from None
        os.chown(folder, user.pw_uid, user.pw_gid)
        as_user = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--init-groups"]
    data = folder / "data"
    init = subprocess.run([*as_user, initdb, "-D", str(data), "-U", ROLE, "-A", "trust", "--no-locale",
                           "-E", "UTF8", "--no-sync"], capture_output=True, text=True)
    if init.returncode != 0:
        shutil.rmtree(folder, ignore_errors=True)
        raise RuntimeError(f"initdb failed: {(init.stderr or init.stdout).strip()[-300:]}")
    port = _free_port()
    settings = ["-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={folder}",
                "-c", "max_connections=50"]
    if not durable:
        settings += ["-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"]
    log = open(folder / "server.log", "wb")
    proc = subprocess.Popen([*as_user, postgres, "-D", str(data), "-p", str(port), *settings],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    server = PostgresServer(folder, port, proc)
    deadline = time.monotonic() + 30
    while True:
        try:
            psycopg.connect(server.url(), connect_timeout=2).close()
            return server
        except psycopg.OperationalError:
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = (folder / "server.log").read_text(errors="replace").strip()[-300:]
                server.stop()
                raise RuntimeError(f"the PostgreSQL server did not start: {tail}") from None
            time.sleep(0.1)
