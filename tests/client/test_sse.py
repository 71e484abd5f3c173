"""The event-stream parser against recorded byte streams, cut at every possible place."""

from __future__ import annotations

import json

import pytest

from jobservice.client.sse import Event, EventParser, KeepAlive, parse

# What the server's stream looks like (jobservice.http.api.native.streams): retry, keep-alives, events, end.
RECORDED = (
    b"retry: 1500\n\n"
    b": keep-alive\n\n"
    b'id: 5-queued\nevent: status\ndata: {"id":"j1","status":"queued","note":"caf\xc3\xa9"}\n\n'
    b": keep-alive\n\n"
    b'id: 7-running\nevent: progress\ndata: {"id":"j1","status":"running","progress":0.5}\n\n'
    b'id: 9-end\nevent: end\ndata: {"id":"j1","status":"succeeded"}\n\n'
)


def events_of(items: list[Event | KeepAlive]) -> list[Event]:
    return [i for i in items if isinstance(i, Event)]


def test_a_recorded_stream() -> None:
    parser = EventParser()
    items = parser.feed(RECORDED)
    events = events_of(items)
    assert [(e.id, e.event) for e in events] == [
        ("5-queued", "status"),
        ("7-running", "progress"),
        ("9-end", "end"),
    ]
    assert json.loads(events[0].data)["note"] == "café"
    assert [i.text for i in items if isinstance(i, KeepAlive)] == ["keep-alive", "keep-alive"]
    assert parser.retry_ms == 1500 and parser.last_event_id == "9-end"


def test_any_cut_of_the_bytes_gives_the_same_events() -> None:
    whole = events_of(list(parse([RECORDED])))
    for cut in range(1, len(RECORDED)):
        assert events_of(list(parse([RECORDED[:cut], RECORDED[cut:]]))) == whole, cut
    assert events_of(list(parse(RECORDED[i : i + 1] for i in range(len(RECORDED))))) == whole


@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"])
def test_every_line_ending(newline: bytes) -> None:
    stream = b"event: stage\ndata: first\ndata: second\nid: 3\n\n".replace(b"\n", newline)
    # a CR at the end of one chunk may be the start of a CRLF: the parser waits for the next byte
    items = [event for i in range(len(stream)) for event in parse([stream[:i], stream[i:]])]
    assert set(events_of(items)) == {Event(event="stage", data="first\nsecond", id="3")}


def test_field_rules_of_the_standard() -> None:
    stream = (
        b"\xef\xbb\xbfdata:no space\n\n"  # a BOM opens the stream; the space after the colon is optional
        b"data\n\n"  # a field name alone: an empty value
        b"event: nameless-data-is-not-dispatched\n\n"
        b"id: 4\nretry: soon\nfoo: bar\ndata: x\n\n"  # a bad retry and an unknown field are ignored
        b"data: keeps the last id\n\n"
        b"id: \x00bad\ndata: y\n\n"  # an id with NUL is ignored
        b"data: never finished"  # the stream ended before the blank line: dropped
    )
    parser = EventParser()
    events = events_of(parser.feed(stream))
    assert events == [
        Event("message", "no space"),
        Event("message", ""),
        Event("message", "x", "4"),
        Event("message", "keeps the last id", "4"),
        Event("message", "y", "4"),
    ]
    assert parser.retry_ms is None


def test_utf8_split_inside_a_character() -> None:
    data = "data: Grüße 🎬\n\n".encode()
    at = data.index("🎬".encode()) + 2
    assert events_of(list(parse([data[:at], data[at:]]))) == [Event("message", "Grüße 🎬")]
