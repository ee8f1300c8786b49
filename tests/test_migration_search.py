"""Migration 0009 indexes the rows parked before the search existed, with a frozen
copy of the terms rule that gives the live rule's terms for any row."""

from __future__ import annotations

import cbor2
import pytest
from django.core.management import call_command
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from deadletter.migrations import _0009_frozen as frozen
from deadletter.migrations._0002_frozen import rows as frozen_rows
from deadletter.migrations._0002_frozen.items import CodecError as FrozenCodecError
from deadletter.models import SearchTerm
from deadletter.queue.search import matching_keys, parse, pending_count
from deadletter.queue.search.words import terms_of
from deadletter.wire import codec
from deadletter.wire.gotime import GoTime
from deadletter.wire.messages import Message
from tests.factories import insert_at
from tests.test_migrations import go_maps, messages

EXTRA = st.dictionaries(
    st.text(min_size=1, max_size=8).filter(lambda k: k.casefold() not in frozen_fields()),
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
        max_leaves=6,
    ),
    max_size=3,
)


def frozen_fields() -> set[str]:
    return {f.casefold() for f in frozen.NOT_TEXT}


@settings(max_examples=300 * settings.default.max_examples // 100, deadline=None)
@given(
    st.lists(
        st.tuples(messages, EXTRA).map(lambda pair: pair[0].replace(extra=pair[1])), max_size=3
    ).map(codec.encode)
    | st.lists(go_maps(), max_size=3).map(cbor2.dumps)
)
@example(b"\x81\xa2gSubject`gsubjecta0")
def test_the_frozen_terms_are_the_live_terms_of_any_row(value: bytes) -> None:
    """Of any row the frozen reading reads: the live reading has since learnt to
    read, as Go does, some rows the release of 0009 refused as corrupt (an integer
    map key, a tag Go ignores), which that release's fetch deleted."""
    try:
        list(frozen_rows.message_maps(value))
    except FrozenCodecError:
        assume(False)
    try:
        live = terms_of(codec.iter_decode(value))
    except codec.CodecError:
        live = set()
    assert frozen.row_terms(value) == live


@pytest.mark.django_db(transaction=True)
def test_the_migration_indexes_every_row_parked_before_it_in_batches() -> None:
    call_command("migrate", "deadletter", "0008", verbosity=0)
    try:
        now = GoTime.now().unix_ns
        made = [
            insert_at("q", now + n, n, Message(subject=f"old row {n}", extra={"order": n}))
            for n in range(frozen.BATCH + 7)
        ]
        assert pending_count() == len(made)
        call_command("migrate", "deadletter", "0009", verbosity=0)
        assert pending_count() == 0
        assert SearchTerm.objects.filter(term="old").count() == len(made)
        assert matching_keys(parse("order:3"), queue="q") == [made[3]]
        call_command("migrate", "deadletter", "0008", verbosity=0)
        assert (pending_count(), SearchTerm.objects.count()) == (len(made), 0)
    finally:
        call_command("migrate", "deadletter", verbosity=0)
