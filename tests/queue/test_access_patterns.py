"""queue.access_patterns: a pattern reads the same in Python as `fnmatch.fnmatchcase`,
and the database's test of each row's queue name (`QueueNameMatches`, what a rule
that is neither a name nor a prefix becomes in SQL) agrees with it on every
database."""

from __future__ import annotations

import fnmatch
import random
import warnings

import pytest
from django.db.models import F

from deadletter.models import QueuedMessage
from deadletter.queue.access_patterns import QueueNameMatches, compiled
from deadletter.wire import codec, keys
from deadletter.wire.messages import Message

NAMES = [
    "billing",
    "billing.cards",
    "a-billing",
    "b-billing",
    "zz-billing.eu",
    "x[1]",
    "x*y",
    "x?y",
    "a^b",
    "a]b",
    "a-b",
    "a\\b",
    "a&b",
    "mail",
    "Mail",
    "straße",
    "ü-billing",
    "日本-billing",
    "line\nbreak",
    "a.b",
    "a+b",
    "a$b",
    "(x)",
    "%_",
]
PATTERNS = [
    "*-billing",
    "?-billing",
    "*billing*",
    "[ab]-*",
    "[!ab]-*",
    "[a-c]-billing",
    "[]]*",
    "a[]^]b",
    "a[!]]b",
    "a[-]b",
    "a[\\]b",
    "a[&]b",
    "x[[]1]",
    "x[*]y",
    "x[?]y",
    "x*",
    "[^a]*",
    "*.eu",
    "m*l",
    "M*",
    "stra?e",
    "?-billing",
    "??-billing",
    "line?break",
    "a.b",
    "a+b",
    "a$b",
    "(*)",
    "%_",
    "[z-a]*",
    "[!]*",
    "a[b-]*",
    "[",
    "a[",
    "*[",
]


def test_python_reads_a_pattern_as_fnmatchcase_does() -> None:
    rnd = random.Random(44)
    alphabet = "ab-!^]\\[*?&|.c\n"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(3000):
            pattern = "".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 8)))
            parsed = compiled(pattern)
            for _ in range(10):
                name = "".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 6)))
                assert parsed.matches(name) == fnmatch.fnmatchcase(name, pattern), (pattern, name)
    for pattern in PATTERNS:
        for name in NAMES:
            assert compiled(pattern).matches(name) == fnmatch.fnmatchcase(name, pattern)


@pytest.mark.django_db
def test_the_database_tests_a_rows_queue_name_as_python_does() -> None:
    value = codec.encode_one(Message(subject="x"))
    rows = [QueuedMessage(key=keys.new_key(name), value=value) for name in NAMES]
    rows.append(QueuedMessage(key=b"a-billing", value=codec.encode([])))  # a legacy row
    QueuedMessage.objects.bulk_create(rows)
    for pattern in PATTERNS:
        found = QueuedMessage.objects.filter(QueueNameMatches(F("key"), compiled(pattern)))
        seen = sorted(keys.queue_of(bytes(k)) for k in found.values_list("key", flat=True))
        legacy = ["a-billing"] if fnmatch.fnmatchcase("a-billing", pattern) else []
        expected = sorted([n for n in NAMES if fnmatch.fnmatchcase(n, pattern)] + legacy)
        assert seen == expected, pattern
