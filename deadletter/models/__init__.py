"""Every model of the app and the column types its migrations name, one module a job:
`fields`, `queued` (the queue table), `redrives`, `archive`, `incidents`, `access`,
`counters`, `overview`."""

# isort: off
# In the order the models were always registered, so a fresh database numbers their
# content types and permissions as before.
from deadletter.models.fields import (
    KEY_BYTES,
    ExactTextField,
    HexKey,
    HexKeyField,
    NotNullIndex,
    StepsField,
)
from deadletter.models.queued import TERM_CHARS, QueuedMessage, QueuedMessageQuerySet, SearchTerm
from deadletter.models.redrives import Redrive
from deadletter.models.archive import ArchivedMessage, Attempt
from deadletter.models.incidents import AlertState, Cause
from deadletter.models.access import QueueAccess
from deadletter.models.counters import (
    DROP_TABLE,
    WARNING_TABLE,
    DropCount,
    ExpiryWarning,
    QueuePass,
)
from deadletter.models.overview import QueueOverview
# isort: on

__all__ = [
    "DROP_TABLE",
    "KEY_BYTES",
    "TERM_CHARS",
    "WARNING_TABLE",
    "AlertState",
    "ArchivedMessage",
    "Attempt",
    "Cause",
    "DropCount",
    "ExactTextField",
    "ExpiryWarning",
    "HexKey",
    "HexKeyField",
    "NotNullIndex",
    "QueueAccess",
    "QueueOverview",
    "QueuePass",
    "QueuedMessage",
    "QueuedMessageQuerySet",
    "Redrive",
    "SearchTerm",
    "StepsField",
]
