"""One version: the package's, pyproject's, the changelog's newest entry and the one /readyz says."""

from __future__ import annotations

import re
import tomllib

from jobservice import __version__
from tests.conftest import ROOT


def test_the_version_is_the_same_everywhere() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert project == __version__
    newest = re.search(r"^## (\d+\.\d+\.\d+)", (ROOT / "CHANGELOG.md").read_text(), re.MULTILINE)
    assert newest is not None and newest.group(1) == __version__, "CHANGELOG.md's newest entry"
    assert f"VERSION ?= {__version__}" in (ROOT / "docker" / "Makefile").read_text()
