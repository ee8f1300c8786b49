"""The optional C speed-up of the scan (deadletter/wire/_speedups.c); the rest is in pyproject.toml.

`optional=True`: where it cannot be compiled, the app installs and runs on
the Python code alone.
"""

from pathlib import Path

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "deadletter.wire._speedups",
            sources=["deadletter/wire/_speedups.c"],
            # The parts _speedups.c includes: a change to one rebuilds it, and
            # an sdist carries them.
            depends=sorted(str(part) for part in Path("deadletter/wire/csrc").glob("*.h")),
            optional=True,
        )
    ]
)
