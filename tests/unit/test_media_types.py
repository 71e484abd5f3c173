"""One table of accepted media types (``jobservice.media.types``): every reader agrees with it, and no
module keeps a copy of it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from flask.testing import FlaskClient

from jobservice.client.uploads import content_type_of
from jobservice.http.web.forms import AUDIO_ACCEPT, IMAGE_ACCEPT
from jobservice.media.types import ACCEPTED, KIND_BY_NAME, MediaType, names_of
from jobservice.media.uploads import AUDIO_FORMATS, IMAGE_FORMATS
from jobservice.settings import Settings
from jobservice.storage.local import guess_content_type
from jobservice.uploads.service import parse_declaration
from tests.conftest import ROOT

SETTINGS = Settings(_env_file=None)  # type: ignore[call-arg]


@pytest.mark.parametrize("name", sorted(KIND_BY_NAME))
def test_every_name_of_the_table_is_a_declarable_upload(name: str) -> None:
    declared = parse_declaration({"filename": "f", "size": 10, "content_type": name}, SETTINGS)
    assert declared.kind == KIND_BY_NAME[name]
    assert name in (IMAGE_ACCEPT if declared.kind == "image" else AUDIO_ACCEPT).split(",")


def test_audio_vnd_wave_is_accepted_everywhere_the_other_wav_names_are() -> None:
    assert KIND_BY_NAME["audio/vnd.wave"] == "audio" and "audio/vnd.wave" in names_of("audio")
    assert "audio/vnd.wave" in AUDIO_ACCEPT.split(",") and "audio/x-wav" in AUDIO_ACCEPT.split(",")


@pytest.mark.parametrize("media", ACCEPTED, ids=lambda t: t.mime)
def test_the_client_the_store_and_the_checks_read_the_same_types(media: MediaType) -> None:
    for ext in media.extensions:
        assert content_type_of(Path(f"file.{ext.upper()}")) == media.mime
        assert guess_content_type(f"jobs/x/input.{ext}") == media.mime
    formats = IMAGE_FORMATS if media.kind == "image" else AUDIO_FORMATS
    assert formats[media.check_name] == (media.extensions[0], media.mime)


def test_the_web_script_reads_the_table_from_its_tag(client: FlaskClient) -> None:
    html = client.get("/").get_data(as_text=True)
    found = re.search(r"<script [^>]*data-media-types='([^']*)'", html)
    assert found, "app.js's tag carries the table"
    handed = json.loads(found.group(1).replace("&#39;", "'"))
    assert [(t["mime"], t["extensions"], t["aliases"]) for t in handed] == [
        (t.mime, list(t.extensions), list(t.aliases)) for t in ACCEPTED
    ]
    script = (ROOT / "jobservice/http/web/static/app.js").read_text()
    assert '"audio/mpeg"' not in script and '"image/png"' not in script, "app.js keeps no table of its own"


def test_no_module_keeps_its_own_table() -> None:
    """A name only an alias carries (``audio/x-wav``) is a string in the table alone."""
    holders = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "jobservice").rglob("*"))
        if path.suffix in (".py", ".js", ".html") and '"audio/x-wav"' in path.read_text()
    ]
    assert holders == ["jobservice/media/types.py"]
