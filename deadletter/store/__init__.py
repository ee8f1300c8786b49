"""The table's plumbing, knowing no rule about messages: statements, index scans,
the detached connection, the spool, the drop counters."""
