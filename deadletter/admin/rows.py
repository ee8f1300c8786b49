"""What the admin shows of one row: its messages decoded once per request, times
as aware datetimes (Django renders them in the user's time zone), values labelled.

Pure display: nothing here writes or knows the queue's rules beyond reading
the age limit to say how long a message has left. Any time another writer can
store shows without an error: ages and time left are counted in nanoseconds
(never `datetime` arithmetic, which stops at the years 1 and 9999), and a
time no time zone can show is written as Go's text.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from django.contrib.admin.utils import display_for_value
from django.utils.formats import date_format
from django.utils.html import escape, format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe
from django.utils.timesince import timesince
from django.utils.timezone import localtime

from deadletter.conf import conf
from deadletter.drain.outcomes import is_held
from deadletter.models import QueuedMessage
from deadletter.queue import age as age_rule
from deadletter.queue import browse, redaction
from deadletter.queue.rows import ATTEMPTS_KEY, LAST_ERROR_KEY, attempts_of
from deadletter.reports import labels
from deadletter.wire import codec, gotime, items, keys
from deadletter.wire.gotime import GoOnlyTime, GoTime
from deadletter.wire.messages import Message

EMPTY = "—"
NEEDS_OPERATOR = "needs an operator"
FUTURE = "in the future"
ERROR_SHOWN = 80

_NS = 1_000_000_000
# The instants every time zone can show: `datetime`'s range less a day at each
# end (a UTC offset is under a day), so the user's zone never overflows.
_SHOWN_FROM_NS = -62_135_510_400 * _NS  # 0001-01-02T00:00:00Z
_SHOWN_UNTIL_NS = 253_402_214_400 * _NS  # 9999-12-31T00:00:00Z
# Spans are worded by `timesince` from this start; longer ones in whole years.
_WORDING_START = datetime(2000, 1, 1, tzinfo=UTC)
_WORDED_NS = (253_370_764_800 - 946_684_800) * _NS  # 2000-01-01 to 9999-01-01
_YEAR_NS = 31_556_952 * _NS  # the Gregorian calendar's mean year


def show_to(objs: Iterable[QueuedMessage], user: Any) -> None:
    """Mark rows as shown to `user`: their redacted values (`queue.redaction`) show
    as they are only to a user who may reveal them. An unmarked row shows masked."""
    reveal = redaction.reveals(user)
    for obj in objs:
        obj._reveal = reveal  # type: ignore[attr-defined]


def messages_of(obj: QueuedMessage) -> list[Message] | None:
    """The row's messages as its viewer may see them (`show_to`), decoded once per
    request; None for a row that does not decode or is too large to decode
    (`browse.is_too_large`)."""
    if not hasattr(obj, "_decoded"):
        key, value = bytes(obj.key), bytes(obj.value or b"")
        decoded: list[Message] | None = None
        if not browse.is_too_large(key, len(value)):
            with contextlib.suppress(codec.CodecError):
                decoded = codec.decode(value)
        obj._stored = decoded  # type: ignore[attr-defined]
        if decoded:
            reveal = getattr(obj, "_reveal", False)
            decoded = redaction.redacted_all(decoded, keys.queue_of(key), reveal=reveal)
        obj._decoded = decoded  # type: ignore[attr-defined]
    return obj._decoded  # type: ignore[attr-defined]


def scrubber_of(obj: QueuedMessage) -> redaction.Scrub:
    """How an error text kept beside the row (an attempt's, the archive's last error)
    shows to its viewer (`show_to`): the row's redacted values it quotes masked
    (`redaction.scrubber`)."""
    messages_of(obj)
    stored: list[Message] | None = obj._stored  # type: ignore[attr-defined]
    reveal = getattr(obj, "_reveal", False)
    return redaction.scrubber(keys.queue_of(bytes(obj.key)), stored, reveal=reveal)


def first(obj: QueuedMessage) -> Message | None:
    msgs = messages_of(obj)
    return msgs[0] if msgs else None


def instant_ns(value: Any) -> int | None:
    """Nanoseconds since the epoch of a time (GoTime, GoOnlyTime, aware datetime);
    None for anything else (a naive datetime, a corrupt field)."""
    if isinstance(value, GoTime | GoOnlyTime) or (
        isinstance(value, datetime) and value.utcoffset() is not None
    ):
        return gotime.epoch_ns(value)
    return None


def as_datetime(value: Any) -> datetime | None:
    """A message time as a plain aware datetime (a subclass's arithmetic, kept to
    the nanosecond, costs more than the display needs); None for a time no time
    zone can show (year 0, an offset of ±24:00, within a day of the years 1 and
    9999), which is shown as Go's text instead."""
    if not isinstance(value, datetime):
        return None
    ns = instant_ns(value)
    if ns is not None and not _SHOWN_FROM_NS <= ns < _SHOWN_UNTIL_NS:
        return None
    if type(value) is datetime:
        return value
    return datetime(
        value.year,
        value.month,
        value.day,
        value.hour,
        value.minute,
        value.second,
        value.microsecond,
        value.tzinfo,
    )


def render_time(value: Any) -> Any:
    """A time the way Django renders datetimes (user's zone, one format); Go's
    text for one no zone can show."""
    if value is None:
        return EMPTY
    when = as_datetime(value)
    if when is not None:
        return display_for_value(when, EMPTY)
    return value.format() if isinstance(value, GoTime | GoOnlyTime) else str(value)


def render_time_seconds(value: Any) -> str:
    """A time in the user's zone to the second ("Dec. 1, 2026, 3:48:12 p.m."), for a
    link that must tell two rows a minute apart from each other."""
    when = as_datetime(value)
    if when is None:
        return render_time(value)
    return date_format(localtime(when), "N j, Y, g:i:s a")


def span(ns: int, depth: int = 1) -> str:
    """A span of `ns` nanoseconds in `timesince`'s words ("4 weeks"); whole years
    past what `datetime` can count; "0 minutes" for none."""
    if ns <= 0:
        return timesince(_WORDING_START, _WORDING_START)
    if ns >= _WORDED_NS:
        return f"{ns // _YEAR_NS:,}\xa0years"
    end = _WORDING_START + timedelta(microseconds=ns // 1000)
    return timesince(_WORDING_START, end, depth=depth)


def age(value: Any, now: datetime) -> str:
    """How long ago `value` was ("3 weeks"); `FUTURE` when it is ahead of `now`
    by more than the clock skew the queue allows (`age.MAX_CLOCK_SKEW`)."""
    ns, now_ns = instant_ns(value), instant_ns(now)
    if ns is None or now_ns is None:
        return EMPTY
    if ns - now_ns > age_rule.MAX_CLOCK_SKEW_NS:
        return FUTURE
    return span(now_ns - ns)


def ago(value: Any, now: datetime) -> str:
    """`age` as a phrase: "3 weeks ago", or "in the future"."""
    words = age(value, now)
    return words if words in (EMPTY, FUTURE) else f"{words} ago"


def duration(delta: timedelta) -> str:
    """A span as words ("30 days", "1 day"), not timedelta's "30 days, 0:00:00"."""
    if delta > timedelta(0) and delta == timedelta(days=delta.days):
        return f"{delta.days} day{'s' if delta.days != 1 else ''}"
    return span((delta.days * 86_400 + delta.seconds) * _NS + delta.microseconds * 1000, depth=2)


def expires_in(value: Any, now: datetime, queue: str | None = None) -> str:
    """Time left before the age limit (`queue`'s own, `limits.max_age`) drops the
    message ("expired" once past it)."""
    ns, now_ns = instant_ns(value), instant_ns(now)
    if ns is None or now_ns is None:
        return EMPTY
    left = ns + age_rule.max_age_ns(queue) - now_ns
    if left <= 0:
        return "expired"
    return span(left)


def attempts(msg: Message | None) -> int | str:
    """The attempt count to show: a number, or "corrupt count" for a value that is none."""
    if msg is None:
        return 0
    count = attempts_of(msg.extra)
    return CORRUPT_COUNT if count is None else count


CORRUPT_COUNT = "corrupt count"


def last_error(msg: Message | None) -> str:
    value = msg.extra.get(LAST_ERROR_KEY) if msg else None
    return value if isinstance(value, str) else ""


def code_name(code: Any) -> SafeString:
    """An event code's name as the project names it (its number when it does not),
    breakable after each underscore in a narrow column."""
    name = browse.code_name(code) or str(int(code) if isinstance(code, int) else code)
    return format_html_join(mark_safe("_<wbr>"), "{}", ((part,) for part in name.split("_")))


LONG_TOKEN = 24
_PUNCTUATION = "/.-_?&=:"
_SPACED = re.compile(r"(\s+)")
_AFTER_PUNCTUATION = re.compile(r"[^/.\-_?&=:]+[/.\-_?&=:]*|[/.\-_?&=:]+")


def breakable(text: str) -> SafeString:
    """`text` escaped, a line break allowed inside its long tokens only (a URL, a
    key, a hash: over `LONG_TOKEN` characters): after their punctuation, and
    every `LONG_TOKEN // 2` characters of a run longer than `LONG_TOKEN`. A list
    cell then wraps between words and never cuts one (the CSS breaks no word)."""
    pieces: list[str] = []
    for token in _SPACED.split(text):
        if len(token) <= LONG_TOKEN:
            pieces.append(escape(token))
            continue
        cut: list[str] = []
        for part in _AFTER_PUNCTUATION.findall(token):
            step = LONG_TOKEN // 2 if len(part.rstrip(_PUNCTUATION)) > LONG_TOKEN else len(part)
            cut += [escape(part[i : i + step]) for i in range(0, len(part), step)]
        pieces.append("<wbr>".join(cut))
    return mark_safe("".join(pieces))  # noqa: S308 - every piece is escaped


def clipped(text: str, break_before: str = "") -> SafeString | str:
    """A text for one table cell: two lines at most (CSS), the whole on hover;
    a line may break before each `break_before` (an address's "@") and inside
    long tokens (`breakable`)."""
    if not text:
        return EMPTY
    parts = text.split(break_before) if break_before else [text]
    joiner = format_html("<wbr>{}", break_before)
    shown = format_html_join(joiner, "{}", ((breakable(part),) for part in parts))
    return format_html('<span class="dl-clip" title="{}">{}</span>', text, shown)


def short_error(text: str) -> SafeString | str:
    """The error cut to one table cell (`breakable`); the full text on hover. A
    message kept for an operator says so first (`NEEDS_OPERATOR`)."""
    if not text:
        return EMPTY
    shown = text if len(text) <= ERROR_SHOWN else text[: ERROR_SHOWN - 1] + "…"
    cell = format_html('<span class="dl-error" title="{}">{}</span>', text, breakable(shown))
    return format_html("{}{}", held_marker(text), cell)


def held_marker(error: str | None) -> SafeString | str:
    """`NEEDS_OPERATOR` as a marker before a `LastError` that says its message
    waits for an operator (no drain drops it on that ground); "" otherwise."""
    if not is_held(error):
        return ""
    return format_html('<strong class="dl-held">{}</strong><br>', NEEDS_OPERATOR)


def now() -> datetime:
    return datetime.now(UTC)


def key_parts(key: bytes) -> SafeString:
    """The key once, as the operator needs it: its hex (what URLs and the API use),
    and what it says: queue, when it was parked and its sequence number, or what
    it is instead."""
    text = format_html('<code class="dl-key">{}</code><br>', keys.to_text(key))
    if keys.is_legacy_key(key):
        return text + format_html(
            "queue <b>{}</b>: a legacy aggregate row (an older release's whole queue); "
            "the next fetch splits it into one row per message",
            keys.queue_of(key),
        )
    try:
        parsed = keys.parse_key(key)
    except ValueError:
        return text + format_html(
            "not a key this app writes (queue part <b>{}</b>, {} bytes)",
            keys.queue_of(key),
            len(key),
        )
    return text + format_html(
        "queue <b>{}</b>, parked {}, sequence number {}",
        parsed.queue,
        render_time_seconds(GoTime.from_unix_ns(parsed.time_ns)),
        parsed.seq,
    )


def text_html(text: str) -> SafeString | str:
    """A text as written: one of several lines (a traceback) keeps its lines,
    preformatted; escaped either way."""
    if "\n" not in text:
        return text
    return format_html('<pre class="dl-text">{}</pre>', text.rstrip("\n"))


def key_label(name: str) -> SafeString | str:
    """An extra key's label (`reports.labels`) with its name, which search and
    the API use; a key no one labels is the site's own, labelled by its name."""
    label = labels.label_of(name)
    if label is None:
        return format_html('<code class="dl-key-name">{}</code>', name)
    return format_html('{} <code class="dl-key-name">{}</code>', label, name)


def value_html(value: Any) -> SafeString | str:
    """One field's value: lists as lists, none as "—", times as datetimes, texts
    of several lines as lines."""
    if value is None:
        return EMPTY
    if isinstance(value, str):
        return text_html(value)
    if isinstance(value, list | tuple):
        if not value:
            return "(empty list)"
        return format_html(
            "<ul>{}</ul>", format_html_join("", "<li>{}</li>", ((value_html(v),) for v in value))
        )
    if isinstance(value, dict):
        return format_html(
            "<dl>{}</dl>",
            format_html_join(
                "", "<dt>{}</dt><dd>{}</dd>", ((k, value_html(v)) for k, v in value.items())
            ),
        )
    if isinstance(value, datetime | GoOnlyTime):
        return render_time(value)
    if isinstance(value, bytes):
        return format_html("<code>{}</code> (bytes)", value.hex())
    return str(value)


def message_rows(msg: Message) -> Iterable[tuple[str, Any]]:
    """(label, value) for every field of a message, known ones first."""
    yield "subject", msg.subject or EMPTY
    yield "recipient", msg.username or EMPTY
    yield "code", browse.code_name(msg.code) or str(msg.code)
    yield "first failure (queued at)", render_time(msg.queued_at)
    yield "timestamp", render_time(msg.timestamp)
    yield labels.label_of(ATTEMPTS_KEY) or ATTEMPTS_KEY, attempts(msg)
    error = last_error(msg)
    shown = format_html("{}{}", held_marker(error), text_html(error)) if error else EMPTY
    yield labels.label_of(LAST_ERROR_KEY) or LAST_ERROR_KEY, shown
    yield "descriptions", value_html(msg.descriptions)
    yield "fields", value_html(msg.fields)
    yield "skip recipients", value_html(msg.skip_recipients)
    for name, value in msg.extra.items():
        if name not in (ATTEMPTS_KEY, LAST_ERROR_KEY):
            yield key_label(name), value_html(value)
    for entry in msg.raw_entries:
        name, raw = items.raw_entry(entry)
        shown = format_html("<code>{}</code> (CBOR kept as it came)", raw.hex())
        yield key_label(str(name)), shown


def messages_html(obj: QueuedMessage) -> SafeString:
    msgs = messages_of(obj)
    size = len(obj.value or b"")
    if msgs is None and browse.is_too_large(bytes(obj.key), size):
        return format_html(
            '<p class="errornote">too large to show: {} bytes, over DEADLETTER_MAX_ROW_BYTES '
            "({}). Fetch and the drain leave it undecoded; delete it here, or raise the "
            "setting to hand it over.</p>",
            f"{size:,}",
            f"{conf.MAX_ROW_BYTES:,}",
        )
    if msgs is None:
        return mark_safe(
            '<p class="errornote">corrupt row: its value does not decode as the Go '
            "program's messages; the next fetch drops it. Delete it here to drop it now.</p>"
        )
    if not msgs:
        return mark_safe("<p>(no messages: an empty row)</p>")
    parts = []
    for index, msg in enumerate(msgs, 1):
        title = f"message {index} of {len(msgs)}" if len(msgs) > 1 else "message"
        rows = format_html_join(
            "", '<tr><th scope="row">{}</th><td>{}</td></tr>', message_rows(msg)
        )
        parts.append(
            format_html('<table class="dl-message"><caption>{}</caption>{}</table>', title, rows)
        )
    return format_html_join("", "{}", ((p,) for p in parts))
