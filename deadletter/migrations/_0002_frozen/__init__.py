"""What migration 0002 runs, frozen: copies of `legacy` (split and fold), `codec`,
`messages`, `keys`, `gotime` and `exceptions` as they were when it was written.

A historical migration must do on a database that has not run it yet what it
did when it was written, whatever later commits do to the live modules; so
nothing here imports the live app, and nothing here is ever edited (a fix to
the live code is not a fix to this migration). The C speed-up is left out:
the Python reading gives the same result (tests/test_speedups.py).
"""
