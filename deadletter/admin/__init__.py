"""The Django admin over the queue: importing the package registers every model's
admin (the queued messages, the archive, causes, redrives, queue access and the
queue overview's entry in the index).
"""

from deadletter.admin import (  # noqa: F401
    access,
    archive,
    causes,
    overview_entry,
    queued_messages,
    redrives,
)
from deadletter.admin.queued_messages import QueuedMessageAdmin

__all__ = ["QueuedMessageAdmin"]
