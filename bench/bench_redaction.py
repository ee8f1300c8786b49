"""What `DEADLETTER_REDACT` costs a message shown (`queue.redaction.redacted`) and a
failure's signature (`causes.signature_of`), for each way the setting can be, side
by side in one run: microseconds a call, the median of BENCH_ROUNDS (7) rounds of
BENCH_CALLS (20,000) calls each, no goal. The message is a refund with a customer's
address and card, and a `LastError` quoting the address (what the scrub looks for).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable

from _setup import django_on_fresh_sqlite

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "7"))
CALLS = int(os.environ.get("BENCH_CALLS", "20000"))
NAMES = ["username", "fields[0]", "CeleryKwargs.email"]


def per_call(run: Callable[[], object]) -> float:
    """Microseconds a call of `run`, the median of the rounds."""
    times = []
    for _ in range(ROUNDS):
        started = time.perf_counter()
        for _ in range(CALLS):
            run()
        times.append(time.perf_counter() - started)
    return statistics.median(times) / CALLS * 1e6


def main() -> None:
    django_on_fresh_sqlite("bench_redaction")
    from django.test import override_settings

    from deadletter.queue import redaction
    from deadletter.queue.causes import LAST_ERROR_KEY, signature_of
    from deadletter.wire.messages import Message

    error = "RecipientRefused: <ada@example.com> refused: 550 5.1.1 no such user"
    msg = Message(
        subject="refund for order 12",
        username="ada@example.com",
        fields=["4111111111111111", "12/30"],
        extra={"CeleryKwargs": {"email": "ada@example.com", "amount": 12}},
    )
    failed = msg.replace(extra={**msg.extra, LAST_ERROR_KEY: error})
    settings = [
        ("nothing configured (None)", None),
        ("patterns, none matching the queue", {"mail.*": NAMES}),
        ("three names masked", {"billing.*": NAMES}),
    ]
    print(f"bench_redaction: us a call, median of {ROUNDS} rounds of {CALLS:,} calls")
    print(f"{'setting':38} {'shown':>8} {'shown+err':>10} {'signature':>10}")
    for label, setting in settings:
        with override_settings(DEADLETTER_REDACT=setting):
            shown = per_call(lambda: redaction.redacted(msg, "billing.refunds", reveal=False))
            shown_failed = per_call(
                lambda: redaction.redacted(failed, "billing.refunds", reveal=False)
            )
            signature = per_call(
                lambda: signature_of(error, queue="billing.refunds", msgs=(failed,))
            )
        print(f"{label:38} {shown:8.2f} {shown_failed:10.2f} {signature:10.2f}")
    bare = per_call(lambda: signature_of(error))
    print(f"{'a signature with no queue (before)':38} {'':8} {'':10} {bare:10.2f}")


if __name__ == "__main__":
    main()
