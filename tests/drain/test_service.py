"""`deadletter_drain --forever`: pass after pass, messages parked while it runs are
handed over by a later pass, memory stays flat, and SIGTERM ends it after the
message in hand with exit status 0."""

from __future__ import annotations

import gc
import signal
from pathlib import Path
from typing import Any

import psutil
import pytest
from django.db import connection

from deadletter.drain import Drainer, DrainReport, serve
from deadletter.models import SearchTerm
from deadletter.queue import search
from tests.drain.drain_harness import Drain, recorded
from tests.factories import manage_py, park, parked

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_message_parked_while_the_service_runs_is_handed_over_by_a_later_pass(
    settings: Any,
) -> None:
    settings.DEADLETTER_HANDLERS = {"q": "tests.factories.ok_handler"}
    park("before")
    seen: list[int] = []

    def each(report: DrainReport) -> None:
        seen.append(report.delivered)
        if len(seen) == 1:
            park("while running")
            assert parked() == ["while running"]

    done = serve(Drainer(), interval=0, passes=3, on_pass=each)
    assert seen == [1, 1, 0] and done.delivered == 2 and done.passes == 3
    assert parked() == []


def test_a_stop_between_passes_ends_the_service_at_once(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {"q": "tests.factories.ok_handler"}
    drainer = Drainer()

    def each(report: DrainReport) -> None:
        drainer.stop("SIGTERM")

    done = serve(drainer, interval=3600, on_pass=each)
    assert (done.passes, done.stopped_by) == (1, "SIGTERM")


@pytest.mark.slow
def test_memory_stays_flat_over_hundreds_of_passes(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {
        "q": {"handler": "tests.factories.failing_handler", "backoff": [0.001, 0.001]},
        "ok": "tests.factories.ok_handler",
    }
    process = psutil.Process()

    def each(report: DrainReport) -> None:
        park("again", queue="ok")

    park("stays failing", queue="q")
    serve(Drainer(), interval=0, passes=50, on_pass=each)  # warm up: caches, first imports
    gc.collect()
    before = process.memory_info().rss
    done = serve(Drainer(), interval=0, passes=300, on_pass=each)
    gc.collect()
    grown = process.memory_info().rss - before
    assert done.delivered == 300 and done.failed >= 1
    assert grown < 4 * 2**20, f"RSS grew {grown / 2**20:.1f} MiB over 300 passes"


def test_interval_without_forever_and_forever_with_a_dry_run_are_refused(
    subprocess_env: dict[str, str],
) -> None:
    for args in (["--interval", "5"], ["--forever", "--dry-run"], ["--forever", "--interval", "x"]):
        result = manage_py("deadletter_drain", *args, env=subprocess_env)
        assert result.returncode == 2, (args, result.stderr)


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_the_service_delivers_what_is_parked_while_it_runs_and_exits_0_on_sigterm(
    subprocess_env: dict[str, str], tmp_path: Path, workers: int
) -> None:
    if workers > 1 and connection.vendor == "sqlite":
        pytest.skip("--workers needs PostgreSQL or MySQL/MariaDB")
    park("first")
    service = Drain(
        subprocess_env, tmp_path, "--forever", "--interval", "1", "--workers", str(workers)
    )
    service.wait_for(lambda: recorded(service.record) == ["first:-"])
    park("second")
    service.wait_for(lambda: recorded(service.record) == ["first:-", "second:-"])
    service.proc.send_signal(signal.SIGTERM)
    assert service.wait() == 0, service.output()
    assert "Stopped by SIGTERM" in service.output()
    assert parked() == []


def test_between_passes_the_service_indexes_new_rows_and_sweeps_delivered_ones(
    settings: Any,
) -> None:
    settings.DEADLETTER_HANDLERS = {"q": "tests.factories.ok_handler"}
    (delivered,) = park("delivered")
    search.index_pending()
    assert SearchTerm.objects.filter(key=delivered).exists()
    park("waiting elsewhere", queue="other")
    assert search.pending_count() == 1
    serve(Drainer(), interval=0, passes=1)
    assert search.pending_count() == 0
    assert not SearchTerm.objects.filter(key=delivered).exists()
    assert SearchTerm.objects.filter(term="elsewhere").exists()
