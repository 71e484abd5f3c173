"""Hostile request bodies and files on ``POST /v1/videos``: every one is a 4xx in OpenAI's error shape
(``{"error": {"message", "type", "param", "code"}}``) with the exact status and code, leaves no job,
no stored object and no spool file behind, and the service still answers ``/healthz`` (the style of
``tests/unit/hostile.py``). Routes that name a video: ``test_hostile_v1_routes.py``.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from jobservice.wiring import Services
from tests.openai.hostile_v1 import (
    PORTRAIT_MODEL,
    T2V,
    Send,
    assert_v1_refusal,
    create,
    data_url,
    form,
    json_body,
    post_multipart,
)
from tests.unit.hostile import leftovers

BODY_CASES: dict[str, tuple[Send, int, str, str | None]] = {
    # bodies that are not a JSON object
    "malformed JSON": (json_body('{"model": "reference-t2v", "prompt": '), 400, "invalid_json", None),
    "a JSON list": (json_body("[1, 2]"), 400, "invalid_json", None),
    "a JSON string": (json_body('"make a video"'), 400, "invalid_json", None),
    "JSON null": (json_body("null"), 400, "invalid_json", None),
    "an empty JSON body": (json_body(""), 400, "invalid_json", None),
    "NaN in JSON": (json_body('{"prompt": "x", "guidance_scale": NaN}'), 400, "invalid_json", None),
    "JSON that is not UTF-8": (json_body(b'{"prompt": "\xff\xfe"}'), 400, "invalid_json", None),
    "a wrong Content-Type": (
        lambda c: c.post("/v1/videos", data='{"prompt": "x"}', content_type="text/plain"),
        415,
        "unsupported_media_type",
        None,
    ),
    "no Content-Type at all": (
        lambda c: c.post("/v1/videos", data='{"prompt": "x"}'),
        415,
        "unsupported_media_type",
        None,
    ),
    "a JSON body of 34 MB": (
        lambda c: c.post(
            "/v1/videos", data='{"prompt": "' + "a" * (34 * 2**20) + '"}', content_type="application/json"
        ),
        413,
        "payload_too_large",
        None,
    ),
    "a data: URL in JSON over the image limit": (
        lambda c: c.post(
            "/v1/videos", json={**T2V, "input_reference": "data:image/png;base64," + "A" * (30 * 2**20)}
        ),
        413,
        "file_too_large",
        "input_reference",
    ),
    "a form of 5000 parts": (
        lambda c: c.post(
            "/v1/videos",
            data="".join(
                f'--B\r\nContent-Disposition: form-data; name="f{i}"\r\n\r\nx\r\n' for i in range(5000)
            )
            + "--B--\r\n",
            content_type="multipart/form-data; boundary=B",
        ),
        413,
        "payload_too_large",
        None,
    ),
    "a form field sent twice": (form(seed=["1", "2"]), 400, "invalid_parameters", "seed"),
    "a form without a prompt part (cut short)": (
        lambda c: c.post(
            "/v1/videos",
            data='--B\r\nContent-Disposition: form-data; name="prompt"\r\n\r\nhello',
            content_type="multipart/form-data; boundary=B",
        ),
        400,
        "invalid_parameters",
        "prompt",
    ),
    "a lone surrogate in the prompt": (
        json_body('{"model": "reference-t2v", "prompt": "a \\ud800 b"}'),
        400,
        "invalid_parameters",
        "prompt",
    ),
    "a lone surrogate as a field name": (
        json_body('{"model": "reference-t2v", "prompt": "ab", "\\udfff": 1}'),
        400,
        "invalid_parameters",
        "?",
    ),
    "a lone surrogate as the model": (
        json_body('{"model": "\\ud800", "prompt": "ab"}'),
        404,
        "model_not_found",
        "model",
    ),
    # size
    "size abc": (create(size="abc"), 400, "invalid_size", "size"),
    "size 0x0": (create(size="0x0"), 400, "invalid_size", "size"),
    "size 99999x99999": (create(size="99999x99999"), 400, "invalid_size", "size"),
    "size not a multiple of 16": (create(size="100x100"), 400, "invalid_size", "size"),
    "size over the area cap": (create(size="1280x1280"), 400, "invalid_size", "size"),
    "size as a number": (create(size=512), 400, "invalid_size", "size"),
    "size as a list": (create(size=["64", "64"]), 400, "invalid_size", "size"),
    "size with a huge number": (create(size="1" * 400 + "x64"), 400, "invalid_size", "size"),
    # seconds
    "seconds -1": (create(seconds="-1"), 400, "invalid_seconds", "seconds"),
    "seconds 1e9": (create(seconds="1e9"), 400, "invalid_seconds", "seconds"),
    "seconds NaN": (create(seconds="NaN"), 400, "invalid_seconds", "seconds"),
    "seconds inf": (create(seconds="inf"), 400, "invalid_seconds", "seconds"),
    "seconds words": (create(seconds="four"), 400, "invalid_seconds", "seconds"),
    "seconds 0": (create(seconds="0"), 400, "invalid_seconds", "seconds"),
    "seconds the model cannot make": (create(seconds="60"), 400, "invalid_seconds", "seconds"),
    "seconds as a list": (create(seconds=[4]), 400, "invalid_seconds", "seconds"),
    "seconds as an object": (create(seconds={"s": 4}), 400, "invalid_seconds", "seconds"),
    "seconds as true": (create(seconds=True), 400, "invalid_seconds", "seconds"),
    # seed, frames and the other vLLM-Omni fields
    "seed as words": (create(seed="lucky"), 400, "invalid_parameters", "seed"),
    "seed as a float": (create(seed=1.5), 400, "invalid_parameters", "seed"),
    "seed huge": (create(seed=2**70), 400, "invalid_parameters", "seed"),
    "seed negative": (create(seed=-1), 400, "invalid_parameters", "seed"),
    "num_frames negative": (create(num_frames=-5), 400, "invalid_parameters", "num_frames"),
    "num_frames as words": (create(num_frames="many"), 400, "invalid_parameters", "num_frames"),
    "fps zero": (create(fps=0), 400, "invalid_parameters", "fps"),
    "fps as words with seconds": (create(fps="fast"), 400, "invalid_parameters", "fps"),
    "guidance_scale as a list": (create(guidance_scale=[1]), 400, "invalid_parameters", "guidance_scale"),
    "num_inference_steps 0": (
        create(num_inference_steps=0),
        400,
        "invalid_parameters",
        "num_inference_steps",
    ),
    # prompt
    "prompt as a list": (create(prompt=["a", "b"]), 400, "invalid_parameters", "prompt"),
    "prompt as a number": (create(prompt=5), 400, "invalid_parameters", "prompt"),
    "prompt empty": (create(prompt=""), 400, "invalid_parameters", "prompt"),
    "prompt very long": (create(prompt="a" * 100_000), 400, "invalid_parameters", "prompt"),
    "prompt with NUL": (create(prompt="a\x00b"), 400, "invalid_text", "prompt"),
    "negative_prompt as an object": (
        create(negative_prompt={"a": 1}),
        400,
        "invalid_parameters",
        "negative_prompt",
    ),
    # model and unknown fields
    "an unknown model": (create(model="sora-2"), 404, "model_not_found", "model"),
    "model as a number": (create(model=7), 400, "invalid_model", "model"),
    "model as a list": (create(model=["reference-t2v"]), 400, "invalid_model", "model"),
    "an unknown field": (create(colour="blue"), 400, "invalid_parameters", "colour"),
    "a field named like an attribute": (create(__class__="x"), 400, "invalid_parameters", "__class__"),
    # inputs a refusal must not echo in full
    "a 100 KB size": (create(size="x" * 100_000), 400, "invalid_size", "size"),
    "a 100 KB seconds": (create(seconds="9" * 100_000), 400, "invalid_seconds", "seconds"),
    "a 100 KB model": (create(model="m" * 100_000), 404, "model_not_found", "model"),
    "a 100 KB field name": (create(**{"f" * 100_000: 1}), 400, "invalid_parameters", "f" * 64 + "..."),
    "5000 unknown fields": (create(**{f"f{i}": 1 for i in range(5000)}), 400, "invalid_parameters", "f0"),
    # files where files do not belong, or that are not files
    "input_reference that is not base64": (
        create(input_reference="data:image/png;base64,%%%not base64%%%"),
        400,
        "invalid_input",
        "input_reference",
    ),
    "input_reference as a number": (create(input_reference=5), 400, "invalid_input", "input_reference"),
    "input_reference as a URL": (
        create(input_reference="https://example.com/face.png"),
        400,
        "unsupported_reference",
        "input_reference",
    ),
    "input_reference naming no upload": (
        create(input_reference={"file_id": "file_123"}),
        404,
        "upload_not_found",
        "input_reference",
    ),
    "audio as an object": (create(audio={"a": 1}), 400, "invalid_input", "audio"),
}

MEDIA_CASES: dict[str, tuple[Callable[[Path, Path], dict[str, Any]], int, str, str | None]] = {
    "input_reference that is not an image": (
        lambda face, speech: {
            "input_reference": (io.BytesIO(b"%PDF-1.4 not an image"), "face.png"),
            "audio": (io.BytesIO(speech.read_bytes()), "s.mp3"),
        },
        400,
        "invalid_image",
        "input_reference",
    ),  # fmt: skip
    "audio that is not audio": (
        lambda face, speech: {
            "input_reference": (io.BytesIO(face.read_bytes()), "face.png"),
            "audio": (io.BytesIO(b"RIFF....WAVEjunk" * 20), "s.wav"),
        },
        400,
        "invalid_audio",
        "audio",
    ),  # fmt: skip
    "audio as a data: URL of an image": (
        lambda face, speech: {
            "input_reference": (io.BytesIO(face.read_bytes()), "face.png"),
            "audio": data_url("audio/wav", face.read_bytes()),
        },
        400,
        "invalid_audio",
        "audio",
    ),  # fmt: skip
    "audio missing": (
        lambda face, speech: {"input_reference": (io.BytesIO(face.read_bytes()), "face.png")},
        400,
        "missing_input",
        "audio",
    ),  # fmt: skip
    "input_reference missing": (
        lambda face, speech: {"audio": (io.BytesIO(speech.read_bytes()), "s.mp3")},
        400,
        "missing_input",
        "input_reference",
    ),  # fmt: skip
    "the portrait twice: part and data: URL": (
        lambda face, speech: {
            "input_reference": (io.BytesIO(face.read_bytes()), "face.png"),
            "image": data_url("image/png", face.read_bytes()),
            "audio": (io.BytesIO(speech.read_bytes()), "s.mp3"),
        },
        400,
        "duplicate_input",
        "image",
    ),  # fmt: skip
    "a file part no model takes": (
        lambda face, speech: {
            "input_reference": (io.BytesIO(face.read_bytes()), "face.png"),
            "audio": (io.BytesIO(speech.read_bytes()), "s.mp3"),
            "video": (io.BytesIO(b"x"), "v.mp4"),
        },
        400,
        "unexpected_input",
        "video",
    ),  # fmt: skip
    "an empty image part with a name": (
        lambda face, speech: {
            "input_reference": (io.BytesIO(b""), "face.png"),
            "audio": (io.BytesIO(speech.read_bytes()), "s.mp3"),
        },
        400,
        "invalid_image",
        "input_reference",
    ),  # fmt: skip
    "a data: URL of 17 MB": (
        lambda face, speech: {
            "input_reference": (io.BytesIO(face.read_bytes()), "face.png"),
            "audio": "data:audio/wav;base64," + "A" * (17 * 2**20),
        },
        413,
        "payload_too_large",
        None,
    ),  # fmt: skip
    "an image part over the image limit (20 MB)": (
        lambda face, speech: {
            "input_reference": (io.BytesIO(face.read_bytes() + bytes(21 * 2**20)), "f.png"),
            "audio": (io.BytesIO(speech.read_bytes()), "s.mp3"),
        },
        413,
        "file_too_large",
        "input_reference",
    ),  # fmt: skip
    "a data: URL whose base64 is cut short": (
        lambda face, speech: {
            "input_reference": (io.BytesIO(face.read_bytes()), "face.png"),
            "audio": data_url("audio/mpeg", speech.read_bytes())[:-3],
        },
        400,
        "invalid_input",
        "audio",
    ),  # fmt: skip
    "a portrait to a text model": (
        lambda face, speech: {
            "model": "reference-t2v",
            "input_reference": (io.BytesIO(face.read_bytes()), "face.png"),
        },
        400,
        "unexpected_input",
        "input_reference",
    ),  # fmt: skip
    "a text field sent twice": (
        lambda face, speech: {
            "input_reference": (io.BytesIO(face.read_bytes()), "face.png"),
            "audio": (io.BytesIO(speech.read_bytes()), "s.mp3"),
            "seed": ["1", "2"],
        },
        400,
        "invalid_parameters",
        "seed",
    ),  # fmt: skip
    "a file part sent twice": (
        lambda face, speech: {
            "input_reference": [
                (io.BytesIO(face.read_bytes()), "a.png"),
                (io.BytesIO(face.read_bytes()), "b.png"),
            ],
            "audio": (io.BytesIO(speech.read_bytes()), "s.mp3"),
        },
        400,
        "duplicate_input",
        "input_reference",
    ),  # fmt: skip
}


@pytest.mark.parametrize("name", list(BODY_CASES))
def test_a_hostile_body_is_an_openai_4xx_that_leaves_nothing(
    hostile: tuple[FlaskClient, Services], name: str
) -> None:
    client, services = hostile
    send, status, code, param = BODY_CASES[name]
    response = send(client)
    assert_v1_refusal(response, status, code, param)
    assert len(response.get_data()) < 2000  # a refusal quotes the input, never echoes it whole
    assert leftovers(services) == []
    assert client.get("/healthz").status_code == 200


@pytest.mark.parametrize("name", list(MEDIA_CASES))
def test_a_hostile_file_is_an_openai_4xx_that_leaves_nothing(
    hostile: tuple[FlaskClient, Services], portrait: Path, short_speech: Path, name: str
) -> None:
    client, services = hostile
    files, status, code, param = MEDIA_CASES[name]
    response = post_multipart(client, "/v1/videos", {**PORTRAIT_MODEL, **files(portrait, short_speech)})
    assert_v1_refusal(response, status, code, param)
    assert leftovers(services) == []
    assert client.get("/healthz").status_code == 200


# --- vLLM-Omni's reference fields: JSON objects (as JSON text in a form field) --------------------


def test_vllm_omni_image_and_audio_references_are_the_portrait_and_speech(
    hostile: tuple[FlaskClient, Services], portrait: Path, short_speech: Path
) -> None:
    client, services = hostile
    image = json.dumps({"image_url": data_url("image/png", portrait.read_bytes())})
    audio = json.dumps({"audio_url": data_url("audio/mpeg", short_speech.read_bytes())})
    created = post_multipart(
        client, "/v1/videos", {**PORTRAIT_MODEL, "image_reference": image, "audio_reference": audio}
    )
    assert created.status_code == 200, created.get_data(as_text=True)
    assert created.get_json()["seconds"] == "2" and created.get_json()["size"] == "416x512"
    as_json = client.post(
        "/v1/videos",
        json={**PORTRAIT_MODEL, "image_reference": json.loads(image), "audio_reference": json.loads(audio)},
    )
    assert as_json.status_code == 200, as_json.get_data(as_text=True)


REFERENCE_CASES: dict[str, tuple[dict[str, Any], int, str, str]] = {
    "image_reference that is not JSON": ({"image_reference": "data:image/png;base64,AAAA"}, 400, "invalid_input",
                                         "image_reference"),
    "image_reference that is a JSON list": ({"image_reference": "[1]"}, 400, "invalid_input", "image_reference"),
    "image_reference without image_url": ({"image_reference": '{"url": "x"}'}, 400, "invalid_input",
                                          "image_reference"),
    "image_reference naming no upload": ({"image_reference": '{"file_id": "file_1"}'}, 404, "upload_not_found",
                                         "image_reference"),
    "image_reference to be fetched": ({"image_reference": '{"image_url": "http://169.254.169.254/x.png"}'}, 400,
                                      "unsupported_reference", "image_reference"),
    "audio_reference of not audio": ({"audio_reference": json.dumps({"audio_url": data_url("audio/wav", b"x" * 99)})},
                                     400, "invalid_audio", "audio_reference"),
    "an audio object without audio_url": ({"audio": {"a": 1}}, 400, "invalid_input", "audio"),
}  # fmt: skip


@pytest.mark.parametrize("name", list(REFERENCE_CASES))
def test_a_bad_reference_object_is_a_400(
    hostile: tuple[FlaskClient, Services], portrait: Path, short_speech: Path, name: str
) -> None:
    client, services = hostile
    fields, status, code, param = REFERENCE_CASES[name]
    form = {
        **PORTRAIT_MODEL,
        "input_reference": (io.BytesIO(portrait.read_bytes()), "face.png"),
        "audio": (io.BytesIO(short_speech.read_bytes()), "s.mp3"),
    }
    for key in fields:  # the reference replaces the part it stands for
        form.pop("audio" if key.startswith("audio") else "input_reference")
    if isinstance(next(iter(fields.values())), dict):
        body = {**PORTRAIT_MODEL, **fields, "input_reference": data_url("image/png", portrait.read_bytes())}
        response = client.post("/v1/videos", json=body)
    else:
        response = post_multipart(client, "/v1/videos", {**form, **fields})
    assert_v1_refusal(response, status, code, param)
    assert leftovers(services) == []
