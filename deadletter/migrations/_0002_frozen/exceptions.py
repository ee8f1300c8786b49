# Frozen for migration 0002: a copy of deadletter/exceptions.py as of the migration. Never edit.
"""The one exception base of the app; every error it raises on purpose derives from it."""


class DeadletterError(Exception):
    """Base of every error deadletter raises on purpose."""


class PermanentFailure(DeadletterError):
    """Raised by a handler for a message that can never be delivered: drop it, don't retry."""
