"""What an alert channel is: `"mail_admins"`, or a webhook `{"webhook": url,
"secret": str}`. The one reading of a channel spec, for the system checks (E024,
E025, through `drain.policy`) and for the sender and its redelivery
(`reports.alerts`): a spec `manage.py check` passes is one the sender takes, and a
spec the sender refuses is refused with the text the check gives.

The signature, not the scheme, is what a receiver trusts: http and https both
pass, and https keeps the body private on the way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

__all__ = [
    "MAIL_ADMINS",
    "WEBHOOK",
    "WEBHOOK_KEYS",
    "channel_problems",
    "channels_problems",
    "url_problem",
]

MAIL_ADMINS = "mail_admins"
WEBHOOK = "webhook"
WEBHOOK_KEYS = (WEBHOOK, "secret")


def channels_problems(value: Any, where: str) -> list[str]:
    """Everything wrong with the list of channel specs named `where`."""
    if not isinstance(value, list | tuple):
        return [f"{where} must be a list of channels, got {value!r}"]
    return [
        problem
        for index, spec in enumerate(value)
        for problem in channel_problems(spec, f"{where}[{index}]")
    ]


def channel_problems(spec: Any, where: str = "channel") -> list[str]:
    """Everything wrong with the channel spec named `where`; [] when it is sound.
    A secret is never written into a text (only its type, when it is not a str)."""
    if spec == MAIL_ADMINS:
        return []
    if not isinstance(spec, Mapping):
        return [f'{where} must be "mail_admins" or {{"webhook": url, "secret": str}}, got {spec!r}']
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


def url_problem(url: Any, where: str) -> str | None:
    """What keeps `url` (named `where`) from being a webhook's address, an absolute
    http or https URL with a host, or None; urllib alone would also open `file:`."""
    try:
        parts = urlsplit(url) if isinstance(url, str) else None
    except ValueError:  # a bracketed host that is not an IP address
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        return f"{where} must be an http(s):// URL, got {url!r}"
    return None
