"""`manage.py deadletter_purge`: the archive's entries past their queue's
retention go, `--dry-run` says which would, bad input is one clear error."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from deadletter.models import ArchivedMessage
from deadletter.queue import archive
from tests.factories import manage_py, park

pytestmark = pytest.mark.django_db


def purge(*args: str) -> str:
    out = io.StringIO()
    call_command("deadletter_purge", *args, stdout=out)
    return out.getvalue()


def archived(queue: str, subject: str, *, days: float) -> bytes:
    (key,) = park(subject, queue=queue)
    archive.discard(key, "tester")
    ArchivedMessage.objects.filter(key=key).update(
        archived_at=datetime.now(UTC) - timedelta(days=days)
    )
    return key


def subjects() -> list[str]:
    return sorted(e.msg.subject for e in archive.archived_msgs() if e.msg)


@pytest.fixture
def two_queues(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {
        "week": {"handler": "tests.factories.ok_handler", "archive_for": timedelta(days=7)}
    }
    archived("week", "week-old", days=8)
    archived("week", "week-new", days=6)
    archived("q", "q-old", days=31)
    archived("q", "q-new", days=1)


def test_purge_removes_what_is_past_each_queues_retention(two_queues: None) -> None:
    out = purge()
    assert "Purged 1 archived message(s) of queue q (kept for 30 days)." in out
    assert "Purged 1 archived message(s) of queue week (kept for 7 days)." in out
    assert "Purged 2 archived message(s) in all." in out
    assert subjects() == ["q-new", "week-new"]
    assert purge().startswith("Nothing to purge")


def test_dry_run_says_what_would_go_and_removes_nothing(two_queues: None) -> None:
    out = purge("--dry-run", "--queue", "week")
    assert out == "Would purge 1 archived message(s) of queue week (kept for 7 days).\n"
    assert len(subjects()) == 4


def test_queue_limits_the_purge_to_that_queue(two_queues: None) -> None:
    purge("--queue", "q", "--batch", "1")
    assert subjects() == ["q-new", "week-new", "week-old"]


def test_a_queue_known_only_by_its_archive_is_accepted() -> None:
    archived("gone", "old", days=40)
    assert "Purged 1" in purge("--queue", "gone")


def test_an_unknown_queue_is_one_error_naming_it() -> None:
    with pytest.raises(CommandError, match="nosuch") as raised:
        purge("--queue", "nosuch")
    assert raised.value.returncode == 2


@pytest.mark.parametrize(
    ("args", "said"), [(["--batch", "0"], "at least 1"), (["--queue", ""], "must not be empty")]
)
def test_bad_arguments_exit_non_zero_before_touching_anything(
    subprocess_env: dict[str, str], args: list[str], said: str
) -> None:
    result = manage_py("deadletter_purge", *args, env=subprocess_env)
    assert result.returncode == 2
    assert said in result.stderr
