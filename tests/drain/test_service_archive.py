"""The drain service purges the archive by retention between its passes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from deadletter.drain import Drainer, serve
from deadletter.models import ArchivedMessage
from deadletter.queue import archive
from tests.factories import park

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_service_purges_entries_past_their_queues_archive_for(settings: Any) -> None:
    settings.DEADLETTER_HANDLERS = {"q": "tests.factories.ok_handler"}
    old, recent = park("old", "recent", queue="other")
    archive.discard(old, "alice")
    archive.discard(recent, "alice")
    ArchivedMessage.objects.filter(key=old).update(
        archived_at=datetime.now(UTC) - timedelta(days=31)
    )
    done = serve(Drainer(), interval=0, passes=1)
    assert done.passes == 1
    assert [e.key for e in archive.archived_msgs()] == [recent]
