from collections.abc import Sequence
from typing import Any, TypeVar

from deadletter.wire.gotime import GoTime
from deadletter.wire.messages import EventCode, Message

_Pair = TypeVar("_Pair", bound=tuple[Any, ...])

def format_time(unix_ns: int, offset: int = 0, /) -> str | None: ...
def go_decode(value: Any, /) -> Message | None: ...
def go_encode(msg: Message, stamp_ns: int | None = None, /) -> bytes | None: ...
def go_message(item: Any, /) -> Message | None: ...
def go_time(unix_ns: int, offset: int = 0, /) -> GoTime | None: ...
def parse_time(text: Any, /) -> GoTime | None: ...
def read_rows(
    rows: Sequence[Any],
    start: int,
    stop: int,
    cutoff_ns: int,
    max_row_bytes: int,
    pair_type: type[_Pair],
    /,
) -> tuple[list[_Pair], int]: ...
def setup(
    message_type: type[Message],
    gotime_type: type[GoTime],
    event_codes: dict[int, Any],
    go_keys: tuple[str, ...],
    attributes: tuple[str, ...],
    event_code_type: type[EventCode],
    /,
) -> None: ...
def setup_time(gotime_type: type[GoTime], /) -> None: ...
