"""What the admin calls the extra keys the app and its integrations write, in
one table: the drain's own keys, and each installed integration's, which its
capture registers when it is imported (the admin cannot import an integration:
both are edges). A key no one registered is a site's own, shown by its name.
"""

from __future__ import annotations

from collections.abc import Mapping

from deadletter.queue.rows import ATTEMPTS_KEY, LAST_ERROR_KEY

__all__ = ["label_of", "register"]

_labels: dict[str, str] = {
    ATTEMPTS_KEY: "attempts",
    LAST_ERROR_KEY: "last error",
}


def register(labels: Mapping[str, str]) -> None:
    """Label an integration's extra keys (registering the same label again is a
    no-op; another label for a key already labelled is a `ValueError`)."""
    for key, label in labels.items():
        held = _labels.setdefault(key, label)
        if held != label:
            raise ValueError(f"extra key {key!r} is already labelled {held!r}")


def label_of(key: str) -> str | None:
    """The label of an extra key the app or an installed integration writes; None
    for any other key."""
    return _labels.get(key)
