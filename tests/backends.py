"""Database sessions killed from a second connection, as a server restart, a
failover or an operator's `pg_terminate_backend` / `KILL` does to a process:
shared by the reconnect tests of the store and of the drain service."""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Any

import pytest
from django.db import DatabaseError, connection, connections
from django.db.backends.base.base import BaseDatabaseWrapper


@pytest.fixture
def server_db() -> None:
    if connection.vendor == "sqlite":
        pytest.skip("SQLite is a file opened in this process: there is no server session to kill")


def backend_id(of: BaseDatabaseWrapper) -> int:
    """The server's id of `of`'s session (connecting it first)."""
    with of.cursor() as cursor:
        cursor.execute(
            "SELECT CONNECTION_ID()" if of.vendor == "mysql" else "SELECT pg_backend_pid()"
        )
        return int(cursor.fetchone()[0])


def kill(*ids: int) -> None:
    """End those sessions from a second connection of this test's (a superuser on
    both servers), so the test's own connection may be one of them."""
    killer = connections.create_connection(connection.alias)
    try:
        with killer.cursor() as cursor:
            for session in ids:
                if killer.vendor == "mysql":
                    with contextlib.suppress(DatabaseError):  # it ended on its own meanwhile
                        cursor.execute(f"KILL {int(session)}")
                else:
                    cursor.execute("SELECT pg_terminate_backend(%s)", [session])
    finally:
        killer.close()


def other_sessions() -> list[int]:
    """Every other session on this test's database (the test database's name has
    the test run's pid: no other run's sessions are on it)."""
    with connection.cursor() as cursor:
        if connection.vendor == "mysql":
            cursor.execute(
                "SELECT ID FROM information_schema.PROCESSLIST "
                "WHERE DB = DATABASE() AND ID <> CONNECTION_ID()"
            )
        else:
            cursor.execute(
                "SELECT pid FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        return [int(row[0]) for row in cursor.fetchall()]


def kill_other_sessions() -> int:
    """Kill every other session on this test's database; how many there were."""
    found = other_sessions()
    if found:
        kill(*found)
    return len(found)


class Relay:
    """A TCP relay on a port of its own to the database server, so a test can take
    the server away from one process and give it back, as a restart or a network
    fault does: `cut` drops every session through it and refuses new ones,
    `restore` accepts again on the same port."""

    def __init__(self, settings_dict: dict[str, Any]) -> None:
        mysql = settings_dict["ENGINE"].endswith("mysql")
        self._target = (
            settings_dict.get("HOST") or "127.0.0.1",
            int(settings_dict.get("PORT") or (3306 if mysql else 5432)),
        )
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._open = True
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._start(self._listener)

    def __enter__(self) -> Relay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cut()

    def cut(self) -> None:
        with self._lock:
            self._open = False
            self._listener.close()
            for sock in self._sockets:
                self._drop(sock)
            self._sockets.clear()

    def restore(self) -> None:
        with self._lock:
            self._open = True
            self._listener = socket.create_server(("127.0.0.1", self.port))
        self._start(self._listener)

    @staticmethod
    def _drop(sock: socket.socket) -> None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()

    def _start(self, listener: socket.socket) -> None:
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:  # cut
                return
            server = socket.create_connection(self._target)
            with self._lock:
                if not self._open:  # cut while this one was being accepted
                    self._drop(client)
                    self._drop(server)
                    return
                self._sockets |= {client, server}
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
