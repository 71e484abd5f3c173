"""Server-Sent Events, read as the HTML standard's "event stream interpretation" says.

Bytes arrive in chunks cut anywhere; lines end in LF, CR or CRLF; ``:`` lines are comments
(heartbeats); an event is dispatched at a blank line and one left unfinished when the stream ends is
dropped. ``id:`` sets the id that a reconnect sends as ``Last-Event-ID``; ``retry:`` the reconnect
delay in milliseconds.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

_LINE_END = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True)
class Event:
    """One dispatched event: ``event`` is "message" when the server named none."""

    event: str
    data: str
    id: str | None = None


@dataclass(frozen=True)
class KeepAlive:
    """A comment line (``: keep-alive``): proof the connection is alive, and nothing more."""

    text: str


class EventParser:
    """Turns chunks of a ``text/event-stream`` body into events, heartbeats and retry hints."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._buffer = ""
        self._first = True  # a BOM may open the stream
        self._after_cr = False  # the last line ended in a CR at the end of a chunk
        self._event = ""
        self._data: list[str] = []
        self._saw_data = False
        self.last_event_id: str | None = None  # the stream's id, kept across events as the spec says
        self.retry_ms: int | None = None

    def feed(self, chunk: bytes) -> list[Event | KeepAlive]:
        """Everything complete in ``chunk`` (and what came before it)."""
        text = self._decoder.decode(chunk)
        if self._first and text:
            text = text.removeprefix("\ufeff")
            self._first = False
        self._buffer += text
        out: list[Event | KeepAlive] = []
        while True:
            line, ended = self._take_line()
            if not ended:
                return out
            item = self._line(line)
            if item is not None:
                out.append(item)

    def _take_line(self) -> tuple[str, bool]:
        """The next whole line from the buffer (False when none is complete yet)."""
        if not self._buffer:
            return "", False
        if self._after_cr and self._buffer.startswith("\n"):
            self._buffer = self._buffer[1:]  # the LF of a CRLF cut between two chunks
        self._after_cr = False
        end = _LINE_END.search(self._buffer)
        if end is None:
            return "", False
        line, self._buffer = self._buffer[: end.start()], self._buffer[end.end() :]
        self._after_cr = end.group() == "\r" and not self._buffer
        return line, True

    def _line(self, line: str) -> Event | KeepAlive | None:
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            return KeepAlive(line[1:].strip())
        name, colon, value = line.partition(":")
        if colon:
            value = value.removeprefix(" ")
        if name == "data":
            self._data.append(value)
            self._saw_data = True
        elif name == "event":
            self._event = value
        elif name == "id" and "\x00" not in value:
            self.last_event_id = value
        elif name == "retry" and value.isdecimal():
            self.retry_ms = int(value)
        return None

    def _dispatch(self) -> Event | None:
        event, data, saw = self._event or "message", "\n".join(self._data), self._saw_data
        self._event, self._data, self._saw_data = "", [], False
        if not saw:
            return None
        return Event(event=event, data=data, id=self.last_event_id)


def parse(chunks: Iterable[bytes]) -> Iterator[Event | KeepAlive]:
    """Events and heartbeats of a whole recorded stream (chunks cut anywhere)."""
    parser = EventParser()
    for chunk in chunks:
        yield from parser.feed(chunk)
