"""Path converters: queue names of any text, keys as text checked by the views."""

from __future__ import annotations


class QueueNameConverter:
    """`<dlqueue:name>`: any text, `/`, `%`, spaces, newlines and the empty name
    included, so that every queue is reachable and a bad name is answered by the
    view's validation (400 naming `name`) rather than by a 404.

    Routes ending in a fixed suffix (`/messages/`, `/drain/`) must come before
    the plain `queues/<name>/`: the match is greedy, so a name holding `/`
    takes everything up to the last suffix.
    """

    regex = r"[\s\S]*"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value
