from typing import Any

from deadletter.wire.gotime import GoTime
from deadletter.wire.messages import EventCode, Message

def go_encode(msg: Message, /) -> bytes | None: ...
def go_message(item: Any, /) -> Message | None: ...
def read_go_time(text: Any, /) -> tuple[int, int] | None: ...
def setup(
    message_type: type[Message],
    gotime_type: type[GoTime],
    event_codes: dict[int, Any],
    go_keys: tuple[str, ...],
    attributes: tuple[str, ...],
    event_code_type: type[EventCode],
    /,
) -> None: ...
