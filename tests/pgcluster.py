"""A throwaway PostgreSQL cluster for tests and benchmarks: Debian's server binaries,
a data directory in a fresh temporary folder, TCP on a free loopback port, a password.

Why a real server and not a mock: what must be shown is how Postgres itself locks,
types and migrates. Started as the `postgres` system user when this process is root
(initdb refuses root).
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

PASSWORD = "s3cret-pw"


def server_bin(name: str) -> str | None:
    """The server program `name` (initdb, pg_ctl): on PATH, or where Debian's package
    puts it (not on PATH there), newest version first."""
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(
        glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), key=lambda p: int(Path(p).parts[-3]), reverse=True
    )
    return candidates[0] if candidates else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """`fsync=False` (tests) trades durability for speed; a benchmark keeps it on."""

    def __init__(self, fsync: bool = False) -> None:
        self.fsync = fsync
        initdb, pg_ctl = server_bin("initdb"), server_bin("pg_ctl")
        if not initdb or not pg_ctl:
            raise FileNotFoundError("PostgreSQL server programs (initdb, pg_ctl) not found: apt-get install postgresql")
        self.initdb, self.pg_ctl = initdb, pg_ctl
        self.root = Path(tempfile.mkdtemp(prefix="campaign-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self._as: list[str] = []
        if os.geteuid() == 0:
            import pwd

            user = pwd.getpwnam("postgres")
            os.chown(self.root, user.pw_uid, user.pw_gid)
            self._as = ["runuser", "-u", "postgres", "--"]

    def _run(self, *argv: str) -> None:
        subprocess.run([*self._as, *argv], check=True, capture_output=True, text=True)

    def start(self) -> Cluster:
        pwfile = self.root / "pw"
        pwfile.write_text(PASSWORD + "\n")
        if self._as:
            import pwd

            user = pwd.getpwnam("postgres")
            os.chown(pwfile, user.pw_uid, user.pw_gid)
        self._run(
            self.initdb,
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "--auth=scram-sha-256",
            f"--pwfile={pwfile}",
            "-E",
            "UTF8",
            *([] if self.fsync else ["--no-sync"]),
        )
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c max_connections=200" + (
            "" if self.fsync else " -c fsync=off"
        )
        self._run(
            self.pg_ctl, "-D", str(self.data), "-l", str(self.root / "log"), "-o", options, "-w", "-t", "60", "start"
        )
        return self

    def url(self, database: str = "postgres", password: bool = True) -> str:
        secret = f":{PASSWORD}" if password else ""
        return f"postgresql+psycopg://postgres{secret}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        import psycopg

        with psycopg.connect(
            f"host=127.0.0.1 port={self.port} user=postgres password={PASSWORD} dbname=postgres", autocommit=True
        ) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        try:
            self._run(self.pg_ctl, "-D", str(self.data), "-m", "immediate", "-w", "stop")
        except subprocess.CalledProcessError:
            pass
        shutil.rmtree(self.root, ignore_errors=True)


def wait_port(port: int, timeout_s: float = 30) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise TimeoutError(port)
