from __future__ import annotations

import pytest

from deadletter.contrib.celery import capture
from deadletter.queue.rows import ATTEMPTS_KEY, LAST_ERROR_KEY
from deadletter.reports import labels


def test_the_drain_s_keys_and_an_installed_integration_s_keys_are_labelled() -> None:
    assert labels.label_of(ATTEMPTS_KEY) == "attempts"
    assert labels.label_of(LAST_ERROR_KEY) == "last error"
    assert labels.label_of(capture.TASK) == "Celery task"


def test_a_key_no_one_registered_has_no_label() -> None:
    assert labels.label_of("order_id") is None


def test_a_key_keeps_the_one_label_it_was_registered_with() -> None:
    labels.register({capture.TASK: "Celery task"})  # the same again: a no-op
    with pytest.raises(ValueError, match="already labelled 'Celery task'"):
        labels.register({capture.TASK: "task"})
    assert labels.label_of(capture.TASK) == "Celery task"
