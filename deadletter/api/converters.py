"""Path converters: queue names of any text, keys as text checked by the views;
and whether the text a route captured was UTF-8 as the client sent it."""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import unquote_to_bytes, urlsplit

from django.http import HttpRequest


class QueueNameConverter:
    """`<dlqueue:name>`: any text, `/`, `%`, spaces, newlines and the empty name
    included, so that every queue is reachable and a bad name is answered by the
    view's validation (400 naming `name`) rather than by a 404. The text is the
    path decoded once, by Django: `%25ff` is the name `%ff`.

    Routes ending in a fixed suffix (`/messages/`, `/drain/`) must come before
    the plain `queues/<name>/`: the match is greedy, so a name holding `/`
    takes everything up to the last suffix.
    """

    regex = r"[\s\S]*"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


# What Django writes in `path_info` for a byte that is not part of valid UTF-8.
REPERCENTED = re.compile(r"%[89A-F][0-9A-F]")


def sent_path(request: HttpRequest) -> bytes | None:
    """The path as the client sent it, still percent-encoded, when the server
    passed it on: ASGI's `raw_path`, gunicorn's `RAW_URI`, uWSGI's and
    mod_wsgi's `REQUEST_URI`."""
    scope = getattr(request, "scope", None)
    if scope is not None:
        raw_path = scope.get("raw_path")
        return raw_path if isinstance(raw_path, bytes) else None
    for variable in ("RAW_URI", "REQUEST_URI"):
        uri = request.META.get(variable)
        if isinstance(uri, str) and uri:
            try:
                return urlsplit(uri).path.encode("latin-1")  # WSGI: one character per byte
            except UnicodeEncodeError:
                return None
    return None


def captured_utf8(request: HttpRequest, captured: Iterable[str]) -> bool:
    """Whether the URL, percent-decoded once, was UTF-8 where the route captured
    text. Django writes each byte that is not as `%XX` (uppercase, 80..FF), the
    same text a name holding `%FF` arrives as (`%25FF`): the path the client
    sent tells the two apart; a server that does not pass it on leaves the
    escape refused either way."""
    raw = sent_path(request)
    if raw is None:
        return not any(REPERCENTED.search(text) for text in captured)
    try:
        unquote_to_bytes(raw).decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
