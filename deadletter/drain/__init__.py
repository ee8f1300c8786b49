"""Hand parked messages back to their handlers, at least once.

A handler is `handle(msg) -> Message | None`, or `handle(msg, ctx)` to be told
the attempt (`context.DeliveryContext`), named per queue in
`DEADLETTER_HANDLERS`; what it does decides the row's fate (`outcomes`, and
the table in docs/drain.md). A row is removed only after its handler
returned, so a crash at any point hands the message in hand over again.

One module a job: `handlers` (loading and checking them, the form each takes),
`context` (what a handler taking two arguments is told), `policy` (a
queue's attempts limit, backoff and breaker), `outcomes` (the rules),
`settling` (what each outcome writes to the row and its history),
`report` (a message's `Outcome`, the run's `DrainReport`), `errors` (a bad
configuration, a held queue, an abort), `delivery` (the one loop every path
hands messages over through), `options` (what a run is asked to do),
`locking` (SQLite's one drain per queue), `workers` (forked workers on
PostgreSQL and MySQL/MariaDB), `run` (the `Drainer`, one pass), `concurrency`
(the threads that keep several messages in hand), `service` (pass after pass,
`--forever`), `stopping` (signals), `timeouts` (handlers under a time limit),
`inflight` and `kills` (the keys a process's handlers hold, and the attempts
of a process that died holding them), `retry` (`redeliver`, the admin's
"retry these": the loop fed by keys), `redrives` (a redrive planned, matched,
cancelled and audited, its rules in one place for every edge), `redrive_run`
(one redrive run here: the claim, the watcher, the walk and its cursor, through
the same loop), `redrive_turns` (unfinished ones resumed, the service's turns)
and `web` (views outside the request's transaction).

The package exports only what a project's code and the edges call
(docs/python-api.md, docs/drain.md); the rest is imported from the module
that defines it, so a helper can change without a public name changing.
"""

from __future__ import annotations

from deadletter.drain.context import DeliveryContext
from deadletter.drain.errors import DrainAborted, DrainConfigError, DrainLocked
from deadletter.drain.handlers import load_handlers
from deadletter.drain.locking import QueueLock
from deadletter.drain.options import DrainOptions
from deadletter.drain.outcomes import LAST_ERROR_LIMIT, deliver, last_error
from deadletter.drain.policy import Policy
from deadletter.drain.redrives import plan_redrive
from deadletter.drain.report import DrainReport, Outcome
from deadletter.drain.retry import redeliver
from deadletter.drain.run import Drainer
from deadletter.drain.service import DEFAULT_INTERVAL, serve
from deadletter.drain.stopping import DEFAULT_GRACE, SignalGuard
from deadletter.drain.timeouts import MAX_HUNG_HANDLERS, hung_handlers
from deadletter.drain.web import outside_request_transactions

__all__ = [
    "DEFAULT_GRACE",
    "DEFAULT_INTERVAL",
    "LAST_ERROR_LIMIT",
    "MAX_HUNG_HANDLERS",
    "DeliveryContext",
    "DrainAborted",
    "DrainConfigError",
    "DrainLocked",
    "DrainOptions",
    "DrainReport",
    "Drainer",
    "Outcome",
    "Policy",
    "QueueLock",
    "SignalGuard",
    "deliver",
    "hung_handlers",
    "last_error",
    "load_handlers",
    "outside_request_transactions",
    "plan_redrive",
    "redeliver",
    "serve",
]
