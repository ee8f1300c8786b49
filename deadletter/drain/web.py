"""Views that drain, retry, purge or delete in bulk must not run inside the
request's transaction (`ATOMIC_REQUESTS`): each message's outcome commits on
its own, as in the command, so a SQLite write lock is never held across a
handler and a server killed mid-drain re-delivers only the message in hand.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from django.conf import settings
from django.db import transaction

__all__ = ["outside_request_transactions"]

_V = TypeVar("_V", bound=Callable[..., Any])


def outside_request_transactions(view: _V) -> _V:
    """`transaction.non_atomic_requests` for every database alias of
    `settings.DATABASES` when the view is wrapped: a handler may write to any of
    them, and those writes must be committed before its row is settled. Put it on
    the function the URL resolver returns (admin views: the method `admin_view`
    wraps; class-based views: `dispatch`, which `as_view` copies it from)."""
    for alias in settings.DATABASES:
        view = transaction.non_atomic_requests(using=alias)(view)
    return view
