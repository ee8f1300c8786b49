"""The queue overview flags the messages a queue set aside because their handler
killed its process (`drain.kills`), with a link to them in the archive."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection

from deadletter.queue import archive_write, store_failed_msgs
from deadletter.wire import codec, keys
from deadletter.wire.messages import Message

pytestmark = pytest.mark.django_db

OVERVIEW = "/admin/deadletter/queuedmessage/overview/"


def set_aside(queue: str, seq: int, reason: str) -> None:
    key = keys.make_key(queue, 1, seq)
    value = codec.encode_one(Message(subject="poison"))
    archive_write.archive_rows(connection, queue, [(key, value)], reason, "drain")


def test_the_overview_flags_a_queue_whose_messages_were_set_aside_as_killed(
    admin_client: Any,
) -> None:
    store_failed_msgs("hooks", Message(subject="live"))
    store_failed_msgs("mail", Message(subject="live"))
    set_aside("hooks", 1, "killed")
    set_aside("hooks", 2, "deleted")
    set_aside("mail", 1, "deleted")
    page = admin_client.get(OVERVIEW).content.decode()
    assert page.count("dl-killed") == 1
    assert "?queue=hooks&amp;reason=killed" in page
    assert ">1 killed</a>" in page
