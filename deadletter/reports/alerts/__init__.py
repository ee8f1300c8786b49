"""Alerts: the rules of `DEADLETTER_ALERTS` evaluated over the queues and their
causes (`evaluate`), each alert sent once with a link to the admin (`state`,
`alert`), through the channels (`channels`: mail_admins, webhooks, the signal)."""
