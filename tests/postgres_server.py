"""A real PostgreSQL server for the tests: Debian's postgresql package (initdb, pg_ctl), its cluster in a temporary
folder (data, socket and log there, a free TCP port on 127.0.0.1), stopped by pg_ctl at the end. It does not touch a
system cluster (/etc/postgresql, pg_ctlcluster's): the server is started from its own folder. As root it runs as the
package's `postgres` user (PostgreSQL refuses to run as root); otherwise as the user running the tests."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

#: where Debian's postgresql-NN package puts its programs
BINARIES = Path("/usr/lib/postgresql")
#: the user a root test run starts the server as (the package creates it)
SERVER_USER = "postgres"


def binaries() -> Path | None:
    """The newest installed server's bin folder (initdb, pg_ctl, psql), or None."""
    found = [d for d in BINARIES.glob("*/bin") if (d / "initdb").is_file() and (d / "pg_ctl").is_file()]
    return max(found, key=lambda d: int(d.parent.name) if d.parent.name.isdigit() else 0) if found else None


def missing() -> str | None:
    """Why no server can be started here, or None."""
    if binaries() is None:
        return "PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb; Debian: apt-get install postgresql)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(SERVER_USER)
        except KeyError:
            return f"PostgreSQL refuses to run as root and there is no {SERVER_USER!r} user to run it as"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A PostgreSQL cluster in a folder of its own; `database` creates a database and its owner and returns the URL
    a client connects with (password authentication over TCP, as a lab's server asks)."""

    def __init__(self):
        self.bin = binaries()
        # not under pytest's folder: it is private to the test user (0700), which the server user cannot enter
        self.root = Path(tempfile.mkdtemp(prefix="cse-kit-postgres-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self.as_user = ["runuser", "-u", SERVER_USER, "--"] if os.geteuid() == 0 else []
        if self.as_user:
            entry = pwd.getpwnam(SERVER_USER)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)

    def start(self, timeout: float = 60) -> None:
        self._run(["initdb", "-D", str(self.data), "-U", "postgres", "--auth-local=trust",
                   "--auth-host=scram-sha-256", "-E", "UTF8", "--locale=C"])
        self.resume(timeout)

    def halt(self) -> None:
        """Stop the server as a crash or a power cut would (`pg_ctl stop -m immediate`): no client is told."""
        self._run(["pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop"])

    def resume(self, timeout: float = 60) -> None:
        """Start the halted server again, on the same port and data."""
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(["pg_ctl", "-D", str(self.data), "-l", str(self.root / "server.log"), "-o", options, "-w",
                   "-t", str(int(timeout)), "start"])

    def database(self, name: str, user: str, password: str) -> str:
        """A database owned by a new user with a password; its SQLAlchemy URL (psycopg 3, the kit's driver)."""
        self.sql(f"CREATE USER {user} WITH PASSWORD '{password}'")
        self.sql(f"CREATE DATABASE {name} OWNER {user}")
        return f"postgresql://{user}:{password}@127.0.0.1:{self.port}/{name}"

    def sql(self, statement: str, database: str = "postgres") -> str:
        """statement's rows as psql prints them unaligned, run as the server's superuser."""
        return self._run(["psql", "-h", str(self.root), "-p", str(self.port), "-U", "postgres", "-d", database,
                          "-v", "ON_ERROR_STOP=1", "-At", "-c", statement])

    def _run(self, command: list[str]) -> str:
        done = subprocess.run([*self.as_user, str(self.bin / command[0]), *command[1:]], capture_output=True,
                              text=True, cwd=self.root)
        if done.returncode:
            log = self.root / "server.log"
            tail = log.read_text()[-1500:] if log.is_file() else ""
            raise RuntimeError(f"{command[0]} failed: {done.stderr.strip()}\n{tail}")
        return done.stdout.strip()

    def stop(self) -> None:
        """Stop the server (fast: its clients are the tests') and remove its folder."""
        if (self.data / "postmaster.pid").is_file():
            subprocess.run([*self.as_user, str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w",
                            "stop"], capture_output=True, cwd=self.root)
        deadline = time.monotonic() + 10
        while (self.data / "postmaster.pid").is_file() and time.monotonic() < deadline:
            time.sleep(0.1)
        shutil.rmtree(self.root, ignore_errors=True)
