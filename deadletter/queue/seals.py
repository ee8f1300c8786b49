"""Seals on the extra keys an integration parks, and the registry of the keys
integrations reserve.

Anyone who may park a message chooses its extra keys (the REST API keeps
unknown ones), so a handler that imports or runs what a message names must act
only on what its own integration parked. That integration seals those keys
when it parks (an HMAC under SECRET_KEY) and checks the seal before it acts;
it also reserves its keys, and the API refuses a message carrying one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

import cbor2
from django.conf import settings
from django.utils.crypto import constant_time_compare, salted_hmac

from deadletter.exceptions import DeadletterError, NeedsOperator

__all__ = [
    "ReservedKey",
    "Seal",
    "SealBroken",
    "canonical",
    "refuse_reserved",
    "reserve",
    "reserved",
]

_reserved: dict[str, str] = {}


class SealBroken(DeadletterError):
    """A message's seal is missing or does not match the keys it covers; the text says which."""


class ReservedKey(DeadletterError, ValueError):
    """A message from outside carries extra keys an integration reserves; the text names them."""


def reserve(owner: str, keys: Iterable[str]) -> None:
    """Reserve extra keys for `owner`, an integration's name; reserving them again
    is a no-op, but a key held by another owner is a `ValueError`."""
    for key in keys:
        holder = _reserved.setdefault(key, owner)
        if holder != owner:
            raise ValueError(f"extra key {key!r} is already reserved by {holder}")


def reserved() -> dict[str, str]:
    """Every reserved extra key and the integration that reserves it."""
    return dict(_reserved)


def refuse_reserved(keys: Iterable[str]) -> None:
    """Raise `ReservedKey` naming every reserved key among `keys` and who reserves it."""
    owners: dict[str, list[str]] = {}
    for key in sorted(set(keys) & _reserved.keys()):
        owners.setdefault(_reserved[key], []).append(repr(key))
    if owners:
        raise ReservedKey(
            "; ".join(
                f"{', '.join(names)} reserved by {owner}, which alone parks them"
                for owner, names in owners.items()
            )
        )


def canonical(values: Mapping[str, Any]) -> bytes:
    """One byte string per value however it reached us: cbor2's canonical CBOR
    (map keys sorted, shortest lossless floats, minimal bignums), which writes a
    tuple as the list and a big int as the bignum tag the queue reads back."""
    return cbor2.dumps(dict(values), canonical=True)


@dataclasses.dataclass(frozen=True)
class Seal:
    """The seal an integration puts in extra key `key`: an HMAC-SHA256 of its
    `fields` (those present, with their values) salted with its `purpose`, so
    one integration's seal never verifies as another's."""

    purpose: str
    key: str
    fields: tuple[str, ...]

    def sealed(self, extra: Mapping[str, Any]) -> dict[str, Any]:
        """`extra` with its seal set, under SECRET_KEY, over the fields' current values."""
        return {**extra, self.key: self._digest(self._payload(extra), settings.SECRET_KEY)}

    def check(self, extra: Mapping[str, Any]) -> None:
        """Raise `SealBroken` unless `extra`'s seal matches its fields under
        SECRET_KEY or one of SECRET_KEY_FALLBACKS (a key rotation keeps seals)."""
        given = extra.get(self.key)
        if given is None:
            raise SealBroken(f"no {self.key} key: the message was not parked by {self.purpose}")
        if not isinstance(given, str):
            raise SealBroken(f"{self.key} is a {type(given).__name__}, not a seal")
        try:
            payload = self._payload(extra)
        except (cbor2.CBOREncodeError, TypeError, ValueError) as exc:
            raise SealBroken(f"the sealed keys do not encode: {exc}") from None
        for secret in (settings.SECRET_KEY, *settings.SECRET_KEY_FALLBACKS):
            if constant_time_compare(given, self._digest(payload, secret)):
                return
        covered = ", ".join(field for field in self.fields if field in extra)
        raise SealBroken(
            f"{self.key} does not match {covered or 'the message'}: changed since "
            f"{self.purpose} parked it, or sealed under a SECRET_KEY no longer in "
            "SECRET_KEY or SECRET_KEY_FALLBACKS"
        )

    def require(self, extra: Mapping[str, Any], refused: str) -> None:
        """`check`, as a drain handler needs it: a broken seal is `NeedsOperator`
        saying `refused` and why. Never a drop: a seal made under a key since
        rotated out verifies again once the key is back in SECRET_KEY_FALLBACKS,
        and a forged message is never acted on while it waits for an operator."""
        try:
            self.check(extra)
        except SealBroken as exc:
            raise NeedsOperator(f"refused to redrive, {refused}: {exc}") from exc

    def _payload(self, extra: Mapping[str, Any]) -> bytes:
        return canonical({field: extra[field] for field in self.fields if field in extra})

    def _digest(self, payload: bytes, secret: str | bytes) -> str:
        salt = f"deadletter.queue.seals:{self.purpose}"
        return salted_hmac(salt, payload, secret, algorithm="sha256").hexdigest()
