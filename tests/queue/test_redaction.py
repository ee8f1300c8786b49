"""What `DEADLETTER_REDACT` masks in a message, and that nothing is copied when
nothing is configured."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import Permission

from deadletter.queue import redaction
from deadletter.queue.redaction import redacted, redacted_names
from deadletter.wire.messages import Message


def message() -> Message:
    return Message(
        username="ada@example.com",
        subject="refund for order 12",
        descriptions=["first", "second line"],
        fields=["4111111111111111", "12/30"],
        extra={
            "card_number": "4111 1111 1111 1111",
            "CeleryKwargs": {"email": "ada@example.com", "amount": 12},
            "Payload": json.dumps({"email": "bob@example.com", "n": 1}),
            "Attempts": 2,
        },
    )


def rules(queue: str, msg: Message) -> list[str]:
    return ["subject"] if queue.startswith("mail.") else []


def test_nothing_configured_is_the_same_message(settings: Any) -> None:
    settings.DEADLETTER_REDACT = None
    msg = message()
    assert redacted(msg, "billing.refunds", reveal=False) is msg


def test_a_queue_no_pattern_matches_is_the_same_message(settings: Any) -> None:
    settings.DEADLETTER_REDACT = {"billing.*": ["username"]}
    msg = message()
    assert redacted(msg, "mail.out", reveal=False) is msg


def test_a_user_who_reveals_gets_the_same_message(settings: Any) -> None:
    settings.DEADLETTER_REDACT = {"*": ["username"]}
    msg = message()
    assert redacted(msg, "q", reveal=True) is msg


def test_parts_are_masked_with_their_length_and_the_stored_message_is_untouched(
    settings: Any,
) -> None:
    settings.DEADLETTER_REDACT = {"billing.*": ["username", "subject", "descriptions"]}
    msg = message()
    shown = redacted(msg, "billing.refunds", reveal=False)
    assert shown.username == "••• (15)"
    assert shown.subject == "••• (19)"
    assert shown.descriptions == ["••• (5)", "••• (11)"]
    assert shown.fields == ["4111111111111111", "12/30"]
    assert msg == message()


def test_an_index_masks_one_item_only(settings: Any) -> None:
    settings.DEADLETTER_REDACT = {"*": ["fields[0]", "descriptions[1]", "fields[7]"]}
    shown = redacted(message(), "q", reveal=False)
    assert shown.fields == ["••• (16)", "12/30"]
    assert shown.descriptions == ["first", "••• (11)"]


def test_an_extra_key_is_masked(settings: Any) -> None:
    settings.DEADLETTER_REDACT = {"*": ["card_number", "NoSuchKey"]}
    shown = redacted(message(), "q", reveal=False)
    assert shown.extra["card_number"] == "••• (19)"
    assert shown.extra["Attempts"] == 2
    assert "NoSuchKey" not in shown.extra


def test_a_key_inside_a_map_and_inside_a_json_text_is_masked(settings: Any) -> None:
    settings.DEADLETTER_REDACT = {"*": ["CeleryKwargs.email", "Payload.email"]}
    shown = redacted(message(), "q", reveal=False)
    assert shown.extra["CeleryKwargs"] == {"email": "••• (15)", "amount": 12}
    assert json.loads(shown.extra["Payload"]) == {"email": "••• (15)", "n": 1}


def test_a_whole_map_is_masked_value_by_value(settings: Any) -> None:
    settings.DEADLETTER_REDACT = {"*": ["CeleryKwargs"]}
    shown = redacted(message(), "q", reveal=False)
    assert shown.extra["CeleryKwargs"] == {"email": "••• (15)", "amount": "••• (2)"}


def test_patterns_add_up(settings: Any) -> None:
    settings.DEADLETTER_REDACT = {"billing.*": ["username"], "*.refunds": ["subject"]}
    shown = redacted(message(), "billing.refunds", reveal=False)
    assert (shown.username, shown.subject) == ("••• (15)", "••• (19)")
    assert redacted_names("billing.refunds", message()) == ["username", "subject"]


@pytest.mark.parametrize("setting", ["tests.queue.test_redaction.rules", rules])
def test_a_callable_names_what_is_masked_per_message(settings: Any, setting: Any) -> None:
    settings.DEADLETTER_REDACT = setting
    assert redacted(message(), "mail.out", reveal=False).subject == "••• (19)"
    msg = message()
    assert redacted(msg, "billing", reveal=False) is msg
    assert redacted_names("mail.out", msg) == ["subject"]


def test_a_changed_setting_is_read_again(settings: Any) -> None:
    settings.DEADLETTER_REDACT = {"*": ["username"]}
    assert redacted(message(), "q", reveal=False).username == "••• (15)"
    settings.DEADLETTER_REDACT = {"*": ["subject"]}
    assert redacted(message(), "q", reveal=False).username == "ada@example.com"


def test_reveals_is_the_permission(django_user_model: Any) -> None:
    user = django_user_model.objects.create_user("viewer")
    assert not redaction.reveals(user)
    user.user_permissions.add(Permission.objects.get(codename="view_unredacted_queuedmessage"))
    user = django_user_model.objects.get(pk=user.pk)
    assert redaction.reveals(user)
