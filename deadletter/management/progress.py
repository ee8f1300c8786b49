"""Progress bars for the long commands: on a terminal a tqdm bar with rate and ETA,
nothing at all when the output is piped, redirected or `--no-progress` is given.

Commands call `progress_bar(self.stderr, total=..., desc=..., enabled=...)` and
feed the `update` it yields; the bar goes to stderr so stdout stays the
command's data (a dump written to stdout stays clean NDJSON).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
from argparse import ArgumentParser
from collections.abc import Callable, Iterator
from typing import Any

from django.core.management.base import OutputWrapper

__all__ = ["add_progress_argument", "is_terminal", "progress_bar"]

logger = logging.getLogger("deadletter")


def add_progress_argument(parser: ArgumentParser) -> None:
    """`--no-progress`: no bar even on a terminal (`options["progress"]` False)."""
    parser.add_argument(
        "--no-progress",
        action="store_false",
        dest="progress",
        help="Show no progress bar (there is none anyway when output is not a terminal).",
    )


def is_terminal(stream: Any) -> bool:
    """Whether `stream` (a file or Django's OutputWrapper) is a terminal."""
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except (ValueError, OSError):  # a closed or detached stream
        return False


def _columns(stream: Any) -> int:
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, ValueError, OSError, io.UnsupportedOperation):
        return 0


class _Unended:
    """The file tqdm writes to: `stream`, whose `write`, where it is Django's
    OutputWrapper, is told to end nothing with a line end (it adds one by default)."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.wrapped = isinstance(stream, OutputWrapper)

    def write(self, text: str) -> None:
        if self.wrapped:
            self.stream.write(text, ending="")
        else:
            self.stream.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def _noop(n: int = 1) -> None:
    return None


@contextlib.contextmanager
def progress_bar(
    stream: Any, *, total: int | None, desc: str, unit: str = "msg", enabled: bool = True
) -> Iterator[Callable[[int], None]]:
    """Yield `update(n)` advancing a bar of `total` steps on `stream` when it is a
    terminal and `enabled`; a function that does nothing otherwise (also without
    tqdm installed). Log lines of the `deadletter` logger go above the bar."""
    if not enabled or not is_terminal(stream):
        yield _noop
        return
    try:
        from tqdm import tqdm
        from tqdm.contrib.logging import logging_redirect_tqdm
    except ImportError:
        yield _noop
        return
    target = _Unended(stream)
    sized = _columns(stream) > 0  # a terminal that reports no size gets 80x24
    with (
        tqdm(
            total=total,
            desc=desc,
            unit=unit,
            unit_scale=unit == "B",
            dynamic_ncols=sized,
            ncols=None if sized else 80,
            nrows=None if sized else 24,  # tqdm hides a bar below a terminal of 0 rows
            file=target,
            mininterval=0.2,
        ) as bar,
        logging_redirect_tqdm(loggers=[logger]),
    ):
        yield bar.update
