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


def test_entries_kept_as_bytes_are_left_out_where_anything_is_masked(settings: Any) -> None:
    """Bytes cbor2 could not read cannot be masked: a masked copy leaves them out."""
    settings.DEADLETTER_REDACT = {"billing.*": ["username"]}
    kept = message().replace(raw_entries=(b"\x00\xf6",))
    assert redacted(kept, "billing.refunds", reveal=False).raw_entries == ()
    assert redacted(kept, "billing.refunds", reveal=True).raw_entries == (b"\x00\xf6",)
    assert redacted(kept, "mail", reveal=False).raw_entries == (b"\x00\xf6",)


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


# --- other texts quoting a redacted value -----------------------------------------


def refused(text: str) -> Message:
    msg = message()
    return msg.replace(extra={**msg.extra, "LastError": text})


def test_a_text_quoting_a_redacted_value_shows_it_masked(settings: Any) -> None:
    settings.DEADLETTER_REDACT = {"billing.*": ["username", "fields[0]"]}
    msg = refused("RecipientRefused: <ADA@example.com> refused; card 4111111111111111 declined")
    shown = redacted(msg, "billing.refunds", reveal=False)
    assert (
        shown.extra["LastError"] == "RecipientRefused: <••• (15)> refused; card ••• (16) declined"
    )
    assert shown.extra["CeleryKwargs"]["email"] == "••• (15)"  # the same value, unnamed
    assert (
        redacted(msg, "billing.refunds", reveal=True).extra["LastError"] == msg.extra["LastError"]
    )
    assert msg == refused(msg.extra["LastError"])


def test_a_value_is_looked_for_as_a_whole_word(settings: Any) -> None:
    settings.DEADLETTER_REDACT = {"*": ["username"]}
    scrub = redaction.scrubber("q", [Message(username="ada1")], reveal=False)
    assert (
        scrub("ada1 failed; ada12 and xada1 did not") == "••• (4) failed; ada12 and xada1 did not"
    )


def test_a_value_shorter_than_scrub_min_is_masked_but_not_looked_for(settings: Any) -> None:
    settings.DEADLETTER_REDACT = {"*": ["username"]}
    msg = Message(username="bob", extra={"LastError": "bob: no such user"})
    shown = redacted(msg, "q", reveal=False)
    assert shown.username == "••• (3)"
    assert shown.extra["LastError"] == "bob: no such user"
    assert len("bob") < redaction.SCRUB_MIN


def test_a_mask_is_never_masked_again(settings: Any) -> None:
    """A redacted number that is also a mask's length (`••• (2015)`) leaves the mask."""
    settings.DEADLETTER_REDACT = {"*": ["fields"]}
    msg = Message(fields=["2015", "x" * 2015], extra={"LastError": "year 2015"})
    shown = redacted(msg, "q", reveal=False)
    assert shown.fields == ["••• (4)", "••• (2015)"]
    assert shown.extra["LastError"] == "year ••• (4)"
    scrub = redaction.scrubber("q", [msg], reveal=False)
    assert scrub("••• (2015) in 2015") == "••• (2015) in ••• (4)"


def test_a_scrubber_leaves_the_text_when_nothing_applies(settings: Any) -> None:
    text = "RecipientRefused: <ada@example.com>"
    settings.DEADLETTER_REDACT = None
    assert redaction.scrubber("billing.x", [message()], reveal=False)(text) == text
    settings.DEADLETTER_REDACT = {"billing.*": ["username"]}
    assert redaction.scrubber("mail.out", [message()], reveal=False)(text) == text
    assert redaction.scrubber("billing.x", [message()], reveal=True)(text) == text
    assert redaction.scrubber("billing.x", None, reveal=False)(text) == text
    masked = redaction.scrubber("billing.x", [message()], reveal=False, lengths=False)
    assert masked(text) == "RecipientRefused: <•••>"
