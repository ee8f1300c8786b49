"""The public API stays where the README says it is, whatever moves underneath."""

from __future__ import annotations

import subprocess
import sys

import pytest
from django.core.management import get_commands

import deadletter
from tests.factories import REPO

PUBLIC = [
    "Message",
    "GoTime",
    "GoOnlyTime",
    "EventCode",
    "Queued",
    "Removal",
    "store_failed_msgs",
    "fetch_failed_msgs",
    "iter_failed_msgs",
    "dequeue",
    "remove_msg",
    "astore_failed_msgs",
    "afetch_failed_msgs",
    "adequeue",
    "aremove_msg",
    "PermanentFailure",
    "NeedsOperator",
    "QueueingError",
    "DeadletterError",
    "MAX_QUEUE_AGE",
    "archived_msgs",
    "restore_msg",
]


@pytest.mark.parametrize("name", PUBLIC)
def test_every_public_name_is_importable_from_the_package(name: str) -> None:
    assert name in deadletter.__all__
    assert getattr(deadletter, name) is not None


def test_the_public_modules_keep_their_names() -> None:
    from deadletter import drain, models, queue

    assert queue.store_failed_msgs is deadletter.store_failed_msgs
    assert queue.restore_msg is deadletter.restore_msg is queue.archive.restore_msg
    assert drain.Drainer and drain.deliver and drain.redeliver
    assert models.QueuedMessage._meta.db_table == "deadletter_queuedmessage"


def test_the_management_commands_keep_their_names() -> None:
    ours = {name for name, app in get_commands().items() if app == "deadletter"}
    assert ours == {
        "deadletter_alerts",
        "deadletter_drain",
        "deadletter_dump",
        "deadletter_export_kv",
        "deadletter_import_kv",
        "deadletter_load",
        "deadletter_purge",
        "deadletter_redrive",
        "deadletter_stats",
    }


def test_importing_the_package_imports_no_model_and_no_django_setup() -> None:
    code = (
        "import sys, deadletter; "
        "loaded = [m for m in sys.modules if m.startswith('deadletter.')]; "
        "print(sorted(loaded))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    assert "deadletter.models" not in out
    assert "deadletter.queue" not in out
