"""QueueOverview: the admin overview's entry, a proxy of the queue table."""

from __future__ import annotations

from deadletter.models.queued import QueuedMessage


class QueueOverview(QueuedMessage):
    """The queue overview's entry in the admin's index and sidebar: no table of its
    own (a proxy), an admin that only sends its viewers to the overview."""

    class Meta:
        proxy = True
        verbose_name = "queue overview"
        verbose_name_plural = "queue overview"
        default_permissions = ()
