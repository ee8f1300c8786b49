"""The search language's qualifiers, written once: the grammar knows a qualifier by
this table, and every help text (the admin's, the API's and its OpenAPI schema, the
commands') and docs/search.md are rendered from it, so none of them goes stale."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "COMPARED",
    "NAMES",
    "OTHER_KEY",
    "QUALIFIERS",
    "Qualifier",
    "help_text",
    "markdown_table",
    "summary",
]


@dataclass(frozen=True)
class Qualifier:
    """One `name:value` term: the examples a user copies (the first is the one-line
    help's) and what it finds, said as the end of "finds the messages…"."""

    name: str
    examples: tuple[str, ...]
    meaning: str
    compared: bool = False

    @property
    def example(self) -> str:
        return self.examples[0]


QUALIFIERS: tuple[Qualifier, ...] = (
    Qualifier(
        "subject",
        ("subject:invoice", 'subject:"two words"'),
        "with the word, or the quoted phrase, in the subject only",
    ),
    Qualifier("user", ("user:alice",), "with it in the recipient only"),
    Qualifier("error", ("error:503",), "with it in the last error only"),
    Qualifier(
        "code",
        ("code:3", "code:FINAL_GRADE"),
        "with that code, by number or by the name `DEADLETTER_EVENT_CODES` gives it",
    ),
    Qualifier(
        "cause",
        ('cause:"…"',),
        "whose failure cause (the admin's cause filter, the overview's column) is exactly "
        "this quoted signature",
    ),
    Qualifier("key", ("key:0a1b2c",), "whose key's hex starts so"),
    Qualifier(
        "after",
        ("after:2026-12-01", "after:>2026-12-01T14:30"),
        "first failed (`QueuedAt`) at or after this moment, or strictly after with `>` "
        "(`>=` too); a date alone is its midnight, a time without an offset is in the "
        "site's `TIME_ZONE`",
        compared=True,
    ),
    Qualifier(
        "before",
        ("before:2026-12-01", "before:<=2026-12-01"),
        "first failed before this moment, or at or before it with `<=` (`<` too)",
        compared=True,
    ),
    Qualifier(
        "attempts",
        ("attempts:>3", "attempts:<=1", "attempts:0"),
        "whose failed deliveries so far (the drain's `Attempts`, 0 when never tried) are "
        "more than 3, at most 1, exactly 0 (`>`, `>=`, `<`, `<=`, `=` or none)",
        compared=True,
    ),
    Qualifier(
        "age",
        ("age:>2d", "age:<=90m"),
        "first failed more than two days ago, at most 90 minutes ago (`s`, `m`, `h`, "
        "`d`, `w`; measured from when the search runs, so a stored redrive's `age:` "
        "moves with it)",
        compared=True,
    ),
)
NAMES: frozenset[str] = frozenset(qualifier.name for qualifier in QUALIFIERS)
"""The qualifiers the grammar reads; any other `NAME:` is a key of the message."""
COMPARED: tuple[str, ...] = tuple(q.name for q in QUALIFIERS if q.compared)
"""The qualifiers that read a comparison (`>`, `>=`, `<`, `<=`, `=`) before their value."""
OTHER_KEY = Qualifier(
    "NAME",
    ("order_id:1234", "CeleryTask:shop.tasks.charge"),
    "with that word or phrase in the message's key of that name (any key not named above)",
)
"""`NAME:value`, every name not in `QUALIFIERS`: the message's own key of that name."""


def summary() -> str:
    """The language in one clause, for a help text to put in its own sentence."""
    examples = ", ".join(qualifier.example for qualifier in QUALIFIERS)
    return f'whole words, "a phrase", {examples}, NAME:value for another key'


def help_text() -> str:
    """The one-line help of every search field and `--search` option."""
    return f"The search: {summary()}; every term must hold (docs/search.md)."


def markdown_table() -> str:
    """docs/search.md's table of terms, a row a term (its test holds the page to it)."""
    rows = [
        "| term | finds the messages… |",
        "|---|---|",
        "| `timeout` | with the word in the subject, the recipient, the fields, the "
        "descriptions, the last error, or any other key's text (a Celery task's name and "
        "arguments, a site's own keys) |",
        '| `"connection refused"` | with these words together, in this order, in one of '
        "those texts |",
    ]
    for qualifier in (*QUALIFIERS, OTHER_KEY):
        examples = " ".join(f"`{example}`" for example in qualifier.examples)
        rows.append(f"| {examples} | {qualifier.meaning} |")
    return "\n".join(rows) + "\n"
