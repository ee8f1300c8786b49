"""The one exception base of the app; every error it raises on purpose derives from it."""


class DeadletterError(Exception):
    """Base of every error deadletter raises on purpose."""


class PermanentFailure(DeadletterError):
    """Raised by a handler for a message that can never be delivered: drop it, don't retry."""


class NeedsOperator(DeadletterError):
    """Raised by a handler that cannot act on this message until an operator does something
    (a task this process does not know, a seal that no longer verifies, arguments that cannot
    be sent): the drain keeps the row, saying why, and never drops it on that ground."""
