"""The table's plumbing: statements, the detached connection, the spool, the drop counters."""
