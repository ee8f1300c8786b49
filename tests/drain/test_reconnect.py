"""`deadletter_drain --forever` across a database blip: after its sessions are
killed (PostgreSQL `pg_terminate_backend`, MariaDB `KILL`) or its server goes
away and comes back, a later pass reconnects and delivers what was parked
meanwhile, with 1 and with 4 workers; a database that stays away past
`DEADLETTER_DATABASE_OUTAGE_LIMIT` ends the service with a non-zero exit and
one line naming the database and the driver's error."""

from __future__ import annotations

import contextlib
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from deadletter.drain import Drainer, serve
from tests.backends import Relay, kill_other_sessions, server_db
from tests.drain.drain_harness import Drain, recorded
from tests.factories import park, parked

pytestmark = pytest.mark.django_db(transaction=True)

__all__ = ["server_db"]


def test_a_service_that_cannot_reach_its_database_past_the_limit_gives_up_naming_it(
    settings: Any,
) -> None:
    settings.DEADLETTER_HANDLERS = {"q": "tests.factories.ok_handler"}
    settings.DEADLETTER_DATABASE_OUTAGE_LIMIT = 0.5
    drainer = Drainer()
    saved = dict(connection.settings_dict)
    connection.close()
    if connection.vendor == "sqlite":
        connection.settings_dict["NAME"] = "/nonexistent-dir/deadletter/db.sqlite3"
    else:
        connection.settings_dict["PORT"] = "1"
    try:
        done = serve(drainer, interval=0, passes=3)
    finally:
        connection.close()
        connection.settings_dict.update(saved)
    assert (done.passes, done.stopped_by) == (0, "database unreachable")
    assert done.failure is not None
    assert done.failure.startswith("cannot reach database 'default' (")
    assert "DEADLETTER_DATABASE_OUTAGE_LIMIT" in done.failure and "\n" not in done.failure


@contextlib.contextmanager
def ended(service: Drain) -> Iterator[Drain]:
    """`service`, killed at the end of the block if the test left it running."""
    try:
        yield service
    finally:
        if service.proc.poll() is None:
            service.proc.kill()
            service.proc.wait()


def settings_module(tmp: Path, *lines: str) -> str:
    """A settings module for the service: the project's, the recording handler on
    queue "q", and `lines`."""
    (tmp / "service_settings.py").write_text(
        "from project.settings import *  # noqa: F403\n"
        "DEADLETTER_HANDLERS = {'q': 'tests.drain.drain_harness.recording_handler'}\n"
        + "".join(f"{line}\n" for line in lines)
    )
    return "service_settings"


def drain_via(relay: Relay, env: dict[str, str], tmp: Path, *, outage_limit: float) -> Drain:
    """`deadletter_drain --forever` whose database connections go through `relay`."""
    module = settings_module(tmp, f"DEADLETTER_DATABASE_OUTAGE_LIMIT = {outage_limit!r}")
    url = re.sub(r"@[^/]+/", f"@127.0.0.1:{relay.port}/", env["DATABASE_URL"], count=1)
    env = {**env, "DATABASE_URL": url}
    return Drain(env, tmp, "--forever", "--interval", "1", DJANGO_SETTINGS_MODULE=module)


@pytest.mark.slow
@pytest.mark.parametrize("conn_max_age", [0, None], ids=["closed-each-pass", "persistent"])
@pytest.mark.parametrize("workers", [1, 4])
def test_the_service_delivers_what_is_parked_after_its_sessions_are_killed(
    server_db: None,
    subprocess_env: dict[str, str],
    tmp_path: Path,
    workers: int,
    conn_max_age: int | None,
) -> None:
    park("before")
    module = settings_module(tmp_path, f"DATABASES['default']['CONN_MAX_AGE'] = {conn_max_age}")
    args = ("--forever", "--interval", "1", "--workers", str(workers))
    with ended(Drain(subprocess_env, tmp_path, *args, DJANGO_SETTINGS_MODULE=module)) as service:
        service.wait_for(lambda: "before:-" in recorded(service.record))
        killed = 0
        for _ in range(100):  # every session it has, whatever it is doing, for a while
            killed += kill_other_sessions()
            time.sleep(0.02)
        assert killed > 0
        park("after")
        service.wait_for(lambda: "after:-" in recorded(service.record))
        service.proc.send_signal(signal.SIGTERM)
        assert service.wait() == 0, service.output()
    assert parked() == []


@pytest.mark.slow
def test_the_service_waits_out_a_database_away_for_less_than_the_limit(
    server_db: None, subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    park("before")
    with (
        Relay(connection.settings_dict) as relay,
        ended(drain_via(relay, subprocess_env, tmp_path, outage_limit=300)) as service,
    ):
        service.wait_for(lambda: recorded(service.record) == ["before:-"])
        relay.cut()
        service.wait_for(lambda: "drain cannot reach the database" in service.output())
        relay.restore()
        park("after")
        service.wait_for(lambda: "after:-" in recorded(service.record))
        service.proc.send_signal(signal.SIGTERM)
        assert service.wait() == 0, service.output()
    assert parked() == []


@pytest.mark.slow
def test_a_service_whose_database_stays_away_past_the_limit_exits_non_zero_in_one_line(
    server_db: None, subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    park("before")
    with (
        Relay(connection.settings_dict) as relay,
        ended(drain_via(relay, subprocess_env, tmp_path, outage_limit=1)) as service,
    ):
        service.wait_for(lambda: recorded(service.record) == ["before:-"])
        relay.cut()
        service.wait_for(lambda: service.proc.poll() is not None, timeout=60)
        assert service.proc.returncode == 1, service.output()
    last = service.stderr.read_text().strip().splitlines()[-1]
    where = f"database 'default' ({connection.settings_dict['NAME']} on 127.0.0.1:{relay.port})"
    assert last.startswith(f"CommandError: cannot reach {where} for "), last
    assert "(DEADLETTER_DATABASE_OUTAGE_LIMIT is 1 s): " in last
