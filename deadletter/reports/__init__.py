"""Read-only figures of the queues for operators: the overview, stats, expiry, metrics."""
