"""The API's own throttles, on top of the project's: failed authentications per
address and per credential, and requests per user, each rated by
`DEADLETTER_API_THROTTLE_RATES`."""

from __future__ import annotations

import base64
import hashlib
from typing import Any, ClassVar

from rest_framework.request import Request
from rest_framework.settings import api_settings
from rest_framework.throttling import SimpleRateThrottle, UserRateThrottle

from deadletter.conf import conf

__all__ = [
    "ConfiguredRate",
    "FailedAuthThrottle",
    "FailedCredentialThrottle",
    "UserThrottle",
    "credential_ident",
]


class ConfiguredRate:
    """A throttle rated by `DEADLETTER_API_THROTTLE_RATES[scope]` (None: off), in
    cache keys of its own, apart from the project's DRF throttles."""

    scope: ClassVar[str]
    cache_format = "deadletter-throttle-%(scope)s-%(ident)s"

    def get_rate(self) -> str | None:
        rate: str | None = conf.API_THROTTLE_RATES.get(self.scope)
        return rate


class FailedAuthThrottle(ConfiguredRate, SimpleRateThrottle):
    """Failed authentications (a wrong password or token) per client address: the
    connection's (`REMOTE_ADDR`), or with DRF's `NUM_PROXIES` set, the one its
    proxies append to X-Forwarded-For (`get_ident`). Past the rate a failure from the
    address is a 429 with Retry-After, but a request whose credential authenticates
    still gets through: clients behind one proxy share an address, and one of
    them guessing must not turn the others away (`FailedCredentialThrottle`
    bounds guessing a password)."""

    scope = "failed_auth"

    def get_cache_key(self, request: Request, view: Any) -> str | None:
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}

    def get_ident(self, request: Request) -> str:
        """DRF without `NUM_PROXIES` takes the whole X-Forwarded-For as the client
        wrote it, a new address on every request for a guesser; the connection's
        address cannot be forged."""
        if api_settings.NUM_PROXIES is None:
            return str(request.META.get("REMOTE_ADDR") or "")
        return str(super().get_ident(request))

    def throttle_success(self) -> bool:
        return True  # only a failure counts: `record_failure`

    def wait(self) -> float:
        """Seconds until enough failures leave the window to be under the rate again."""
        return float(self.duration - (self.now - self.history[self.num_requests - 1]))

    def record_failure(self) -> None:
        """Count one failure, on the history read again (checking a password takes
        long enough for other requests to have failed meanwhile), keeping only
        the failures the rate looks at."""
        if self.rate is None or self.key is None:
            return
        now = self.timer()
        history = [t for t in self.cache.get(self.key, []) if t > now - self.duration]
        self.cache.set(self.key, [now, *history][: self.num_requests], self.duration)


class FailedCredentialThrottle(FailedAuthThrottle):
    """Failed authentications per credential, from any address, at the same rate:
    for Basic the user name (so a password is guessed no faster than the rate,
    and that user is held off meanwhile, the right password included), otherwise
    the whole `Authorization` header (a client repeating a wrong token). Past
    the rate the credential is a 429 before it is checked. A request without an
    `Authorization` header is not counted here."""

    def get_cache_key(self, request: Request, view: Any) -> str | None:
        ident = credential_ident(request.META.get("HTTP_AUTHORIZATION", ""))
        if ident is None:
            return None
        return self.cache_format % {"scope": f"{self.scope}_credential", "ident": ident}


def credential_ident(header: str) -> str | None:
    """A digest naming what an `Authorization` header guesses at: a Basic user
    name, else the header itself; None without one."""
    if not header:
        return None
    material = header
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(value.strip(), validate=True).decode("latin-1")
        except ValueError:
            pass
        else:
            material = "basic\0" + decoded.partition(":")[0]
    return hashlib.sha256(material.encode("utf-8", "surrogatepass")).hexdigest()


class UserThrottle(ConfiguredRate, UserRateThrottle):
    """Requests per user, after authentication and permissions (off by default:
    services park through the API, most of all during an incident)."""

    scope = "user"
