"""Read-only figures of the queues for operators: summaries (what every report
starts from), stats, the admin's overview, expiry warnings, Prometheus metrics."""
