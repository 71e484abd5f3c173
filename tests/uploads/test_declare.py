"""Declaring an upload: what ``POST /uploads`` accepts, and how it splits a file into parts."""

from __future__ import annotations

from typing import Any

import pytest

from jobservice.errors import DomainError
from jobservice.settings import Settings
from jobservice.uploads.service import MAX_PARTS, MIB, parse_declaration, plan_parts

SETTINGS = Settings(_env_file=None)  # type: ignore[call-arg]
GOOD = {"filename": "face.png", "size": 1000, "content_type": "image/png"}


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({**GOOD, "size": 0}, 422, "invalid_size"),
        ({**GOOD, "size": -5}, 422, "invalid_size"),
        ({**GOOD, "size": "1000"}, 422, "invalid_size"),
        ({**GOOD, "size": True}, 422, "invalid_size"),
        ({**GOOD, "size": 1.5}, 422, "invalid_size"),
        ({k: v for k, v in GOOD.items() if k != "size"}, 422, "invalid_size"),
        ({**GOOD, "size": SETTINGS.max_image_mb * MIB + 1}, 413, "file_too_large"),
        (
            {**GOOD, "content_type": "audio/wav", "size": SETTINGS.max_audio_mb * MIB + 1},
            413,
            "file_too_large",
        ),
        ({**GOOD, "content_type": "image/gif"}, 415, "unsupported_content_type"),
        ({**GOOD, "content_type": "text/html"}, 415, "unsupported_content_type"),
        ({**GOOD, "content_type": 7}, 422, "invalid_content_type"),
        ({**GOOD, "filename": ""}, 422, "invalid_filename"),
        ({**GOOD, "filename": "   "}, 422, "invalid_filename"),
        ({**GOOD, "filename": "a\x00b.png"}, 422, "invalid_filename"),
        ({**GOOD, "filename": "a\nb.png"}, 422, "invalid_filename"),
        ({**GOOD, "filename": "x" * 256}, 422, "invalid_filename"),
        ({**GOOD, "filename": ["face.png"]}, 422, "invalid_filename"),
        ({**GOOD, "part_size": 1024}, 422, "invalid_part_size"),
        ({**GOOD, "part_size": 6 * 2**30}, 422, "invalid_part_size"),
        ({**GOOD, "part_size": "big"}, 422, "invalid_part_size"),
        ({**GOOD, "bucket": "elsewhere"}, 422, "unexpected_field"),
    ],
)
def test_hostile_declarations_are_refused_with_a_code(body: dict[str, Any], status: int, code: str) -> None:
    with pytest.raises(DomainError) as refused:
        parse_declaration(body, SETTINGS)
    assert (refused.value.status, refused.value.code) == (status, code)
    assert refused.value.message  # a sentence for people


def test_too_many_parts_is_refused() -> None:
    settings = SETTINGS.model_copy(update={"max_audio_mb": 60_000})
    size = (MAX_PARTS + 1) * 5 * MIB
    body: dict[str, Any] = {"filename": "long.wav", "content_type": "audio/wav", "size": size}
    with pytest.raises(DomainError) as refused:
        parse_declaration({**body, "part_size": 5 * MIB}, settings)
    assert refused.value.code == "too_many_parts"
    part, count = plan_parts(parse_declaration(body, settings), settings)  # the default grows instead
    assert count <= MAX_PARTS and part * count >= size


def test_parts_below_and_above_the_threshold() -> None:
    small = parse_declaration({**GOOD, "size": 3 * MIB}, SETTINGS)
    assert plan_parts(small, SETTINGS) == (3 * MIB, 1)  # one PUT
    settings = SETTINGS.model_copy(update={"max_audio_mb": 4096})
    big = parse_declaration({"filename": "a.wav", "content_type": "audio/wav", "size": 2 * 2**30}, settings)
    assert plan_parts(big, settings) == (64 * MIB, 32)
    chosen = parse_declaration({**GOOD, "size": 12 * MIB, "part_size": 5 * MIB}, SETTINGS)
    assert plan_parts(chosen, SETTINGS) == (5 * MIB, 3)  # a chosen part size splits even small files


def test_declared_type_picks_the_kind_case_insensitively() -> None:
    assert parse_declaration({**GOOD, "content_type": "Audio/MPEG"}, SETTINGS).kind == "audio"
    assert parse_declaration(GOOD, SETTINGS).kind == "image"
