"""The names the API's views import, from the modules that hold them by job:
`permissions` (who may call, on which queue), `parsers`, `throttles` and `base`
(the base view and how failures answer)."""

from deadletter.api.base import (
    DeadletterView,
    ServiceUnavailable,
    authenticators,
    handle_exception,
    openapi,
)
from deadletter.api.parsers import BoundedJSONParser, ParsedBody
from deadletter.api.permissions import (
    ADD,
    DELETE,
    DRAIN,
    VIEW,
    ModelPermission,
    answer,
    require,
    scope,
)
from deadletter.api.throttles import (
    ConfiguredRate,
    FailedAuthThrottle,
    FailedCredentialThrottle,
    UserThrottle,
    credential_ident,
)

__all__ = [
    "ADD",
    "DELETE",
    "DRAIN",
    "VIEW",
    "BoundedJSONParser",
    "ConfiguredRate",
    "DeadletterView",
    "FailedAuthThrottle",
    "FailedCredentialThrottle",
    "ModelPermission",
    "ParsedBody",
    "ServiceUnavailable",
    "UserThrottle",
    "answer",
    "authenticators",
    "credential_ident",
    "handle_exception",
    "openapi",
    "require",
    "scope",
]
