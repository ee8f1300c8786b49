"""What migration 0002 runs, frozen: its split and fold (`legacy`), the key rule (`keys`),
and of the codec of the time only what they run: finding a value's CBOR items (`items`)
and writing each as the row value that codec wrote for it (`rows`, `times`).

A historical migration must do on a database that has not run it yet what it
did when it was written, whatever later commits do to the live modules; so
nothing here imports the live app, and nothing here is edited but to drop
what the migration never ran (a fix to the live code is not a fix to this
migration). The C speed-up is left out: the Python reading gives the same
bytes (tests/test_migrations.py holds them to the live encoder's).
"""
