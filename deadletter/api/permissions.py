"""Who may call an API view, on which queue: the model permission a view names for
each method, and per-queue access (`queue.access`, the `QueueAccess` rows).

The user's scope is read once a request (`scope`) and every check of the request
is `queue.access.require` on it; its refusals answer here, in one place (`answer`):
a queue the user may not see answers exactly as one that does not exist (404),
so no name leaks; a queue they see but may not act on that way is a 403.
"""

from __future__ import annotations

from typing import Any

from rest_framework import exceptions
from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from deadletter.queue import access
from deadletter.queue.access import Scope

__all__ = ["ADD", "DELETE", "DRAIN", "VIEW", "ModelPermission", "answer", "require", "scope"]

VIEW = "deadletter.view_queuedmessage"
ADD = "deadletter.add_queuedmessage"
DELETE = "deadletter.delete_queuedmessage"
DRAIN = "deadletter.drain_queuedmessage"


class ModelPermission(BasePermission):
    """The Django model permission the view names for the request's method;
    nothing for anonymous callers (401 with the first authentication class's
    challenge, the token's by default; 403 when that class has none, as in DRF)."""

    def has_permission(self, request: Request, view: Any) -> bool:
        user = request.user
        if not (user and user.is_authenticated):
            return False
        needed = view.permissions.get(request.method, VIEW)
        return bool(user.has_perm(needed))


def scope(request: Request) -> Scope:
    """The user's queue access for this request (`queue.access.scope_of`, memoised
    on the user object, so every view and helper of the request reads it once)."""
    return access.scope_of(request.user)


def answer(denied: access.Denied, absent: str | None = None) -> exceptions.APIException:
    """The API's answer to a refusal of `queue.access`: for `Hidden` the very 404 of
    a missing object (`absent`: its text; DRF's "Not found." when None), for
    `Forbidden` a 403 naming the action and the queue."""
    if isinstance(denied, access.Hidden):
        return exceptions.NotFound(absent)
    return exceptions.PermissionDenied(str(denied))


def require(request: Request, queue: str, action: str = "view", *, absent: str) -> None:
    """Nothing when the user may `action` on `queue`. Otherwise a 404 saying `absent`
    (the very answer of a missing queue, message or entry) when no grant lets them
    see the queue, and a 403 when they see it but `action` is not granted there."""
    try:
        access.require(scope(request), queue, action)
    except access.Denied as denied:
        raise answer(denied, absent) from None
