"""Where an alert goes: one class per kind of channel, `MailAdmins` (`"mail_admins"`)
and `Webhook` (`{"webhook": url, "secret": str}`), each reading and checking its
spec, naming itself, sending an alert's JSON, and saying how it is parked and
found again. `KINDS` is the registry: a new kind is one class added to it.

The one reading of a channel spec, for the system checks (E024, E025, through
`queue.config`), the sender and its redelivery: a spec `manage.py check` passes is
one the sender takes, and a spec the sender refuses is refused with the text the
check gives. The signature, not the scheme, is what a receiver trusts: http and
https both pass, and https keeps the body private on the way.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from django.core.mail import mail_admins

from deadletter.exceptions import DeadletterError
from deadletter.queue import webhooks
from deadletter.queue.webhooks import url_problem

__all__ = [
    "KINDS",
    "MAIL_ADMINS",
    "WEBHOOK",
    "WEBHOOK_KEYS",
    "BadChannel",
    "Channel",
    "MailAdmins",
    "Webhook",
    "channel_name",
    "channel_of",
    "channel_problems",
    "channels_problems",
    "mail_parts",
    "url_problem",
]

MAIL_ADMINS = "mail_admins"
WEBHOOK = "webhook"
WEBHOOK_KEYS = (WEBHOOK, "secret")


class BadChannel(DeadletterError):
    """A channel spec the checks refuse; `problems` in their words."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclasses.dataclass(frozen=True, slots=True)
class MailAdmins:
    """Django's `mail_admins`: the alert's title as the subject, its text, link and
    figures as the body."""

    kind: ClassVar[str] = MAIL_ADMINS

    @staticmethod
    def claims(spec: Any) -> bool:
        return bool(spec == MAIL_ADMINS)

    @staticmethod
    def problems(spec: Any, where: str) -> list[str]:
        return []

    @staticmethod
    def name_of(spec: Any) -> str:
        return MAIL_ADMINS

    @classmethod
    def of(cls, spec: Any) -> MailAdmins:
        return cls()

    @property
    def name(self) -> str:
        return MAIL_ADMINS

    def parked(self, index: int) -> dict[str, Any]:
        """What a parked alert records of its channel (number `index` of its list)."""
        return {"kind": self.kind, "index": index}

    @classmethod
    def rebuilt(cls, parked: Mapping[str, Any], configured: Iterable[Any]) -> MailAdmins | None:
        """The channel a parked alert was for, from its record and the settings."""
        return cls()

    def send(self, data: Mapping[str, Any]) -> None:
        subject, text = mail_parts(data)
        mail_admins(subject, text, fail_silently=False)


@dataclasses.dataclass(frozen=True, slots=True)
class Webhook:
    """A signed POST of the alert's JSON (`queue.webhooks`). Parked by its URL, never
    its secret: the redelivery finds the secret in the settings again."""

    url: str
    secret: str = dataclasses.field(repr=False)
    kind: ClassVar[str] = WEBHOOK

    @staticmethod
    def claims(spec: Any) -> bool:
        return isinstance(spec, Mapping)

    @staticmethod
    def problems(spec: Any, where: str) -> list[str]:
        problems = []
        unknown = sorted(str(key) for key in spec if key not in WEBHOOK_KEYS)
        if unknown:
            known = ", ".join(WEBHOOK_KEYS)
            problems.append(f"{where} has unknown key {unknown[0]!r}; known: {known}")
        url = url_problem(spec.get(WEBHOOK), f"{where}[{WEBHOOK!r}]")
        if url is not None:
            problems.append(url)
        secret = spec.get("secret")
        if not isinstance(secret, str) or not secret:
            got = repr(secret) if secret is None or secret == "" else f"a {type(secret).__name__}"
            problems.append(
                f"{where} needs a 'secret' (a non-empty str the webhook's signature is made "
                f"with), got {got}"
            )
        return problems

    @staticmethod
    def name_of(spec: Any) -> str:
        return str(spec.get(WEBHOOK))

    @classmethod
    def of(cls, spec: Any) -> Webhook:
        return cls(url=spec[WEBHOOK], secret=spec["secret"])

    @property
    def name(self) -> str:
        return self.url

    def parked(self, index: int) -> dict[str, Any]:
        """What a parked alert records of its channel (number `index` of its list)."""
        return {"kind": self.kind, "index": index, "url": self.url}

    @classmethod
    def rebuilt(cls, parked: Mapping[str, Any], configured: Iterable[Any]) -> Webhook | None:
        """The first sound webhook of `configured` with the parked URL, or None."""
        url = parked.get("url")
        for spec in configured:
            if cls.claims(spec) and spec.get(WEBHOOK) == url and not cls.problems(spec, ""):
                return cls.of(spec)
        return None

    def send(self, data: Mapping[str, Any]) -> None:
        webhooks.post(self.url, json.dumps(data).encode(), self.secret)


Channel = MailAdmins | Webhook
KINDS: tuple[type[MailAdmins] | type[Webhook], ...] = (MailAdmins, Webhook)
"""Every kind of channel, the first whose `claims` takes a spec reading it."""


def _kind(spec: Any) -> type[MailAdmins] | type[Webhook] | None:
    return next((kind for kind in KINDS if kind.claims(spec)), None)


def channel_problems(spec: Any, where: str = "channel") -> list[str]:
    """Everything wrong with the channel spec named `where`; [] when it is sound.
    A secret is never written into a text (only its type, when it is not a str)."""
    kind = _kind(spec)
    if kind is None:
        return [f'{where} must be "mail_admins" or {{"webhook": url, "secret": str}}, got {spec!r}']
    return kind.problems(spec, where)


def channels_problems(value: Any, where: str) -> list[str]:
    """Everything wrong with the list of channel specs named `where`."""
    if not isinstance(value, list | tuple):
        return [f"{where} must be a list of channels, got {value!r}"]
    return [
        problem
        for index, spec in enumerate(value)
        for problem in channel_problems(spec, f"{where}[{index}]")
    ]


def channel_of(spec: Any, where: str = "channel") -> Channel:
    """The channel a spec says, or `BadChannel` with what is wrong with it."""
    kind = _kind(spec)
    problems = channel_problems(spec, where)
    if kind is None or problems:
        raise BadChannel(problems)
    return kind.of(spec)


def channel_name(spec: Any) -> str:
    """How a channel is named where it could not be sent to: `mail_admins`, or the
    webhook's URL (never its secret); a spec of no kind by its `repr`."""
    kind = _kind(spec)
    if kind is not None:
        return kind.name_of(spec)
    return spec if isinstance(spec, str) else repr(spec)


def rebuilt(parked: Mapping[str, Any], configured: Iterable[Any]) -> Channel | None:
    """The channel a parked alert's record names, found in `configured` specs when
    it needs the settings (a webhook's secret); None when it is no longer there."""
    kind = next((kind for kind in KINDS if kind.kind == parked.get("kind")), Webhook)
    return kind.rebuilt(parked, configured)


def mail_parts(data: Mapping[str, Any]) -> tuple[str, str]:
    """The subject and body of an alert's mail, from its JSON (`Alert.as_json`):
    its title; its text, the link and the figures."""
    subject = " ".join(str(data.get("title", "")).split())
    lines = [str(data.get("text", "")).rstrip(), "", str(data.get("link", ""))]
    figures = data.get("figures") or {}
    if isinstance(figures, dict) and figures:
        lines += ["", *(f"{name}: {value}" for name, value in figures.items())]
    return subject, "\n".join(lines) + "\n"
