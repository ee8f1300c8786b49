"""The optional C speed-up of the scan (deadletter/wire/_speedups.c); the rest is in pyproject.toml.

`optional=True`: where it cannot be compiled, the app installs and runs on
the Python code alone.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "deadletter.wire._speedups",
            sources=["deadletter/wire/_speedups.c"],
            optional=True,
        )
    ]
)
