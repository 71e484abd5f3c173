"""Fake checkouts, fake launchers and deployment files for tests of the real model back ends."""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.standins.common import read_records

ROOT = Path(__file__).resolve().parents[2]
STANDINS = ROOT / "tests" / "standins"


def wrapper(path: Path, script: Path) -> Path:
    """An executable that runs ``script`` with this test run's Python (a fake torchrun, say)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{script}" "$@"\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


@dataclass
class FakeCheckout:
    """A SoulX checkout made of stand-ins, with the files a test inspects."""

    root: Path
    repo: Path
    ckpt_dir: Path
    wav2vec_dir: Path
    env_script: Path
    torchrun: Path
    record: Path
    mode_file: Path
    extra: dict[str, Any] = field(default_factory=dict)

    def set_mode(self, mode: str) -> None:
        """The failure mode the stand-ins act out from now on."""
        self.mode_file.write_text(mode)

    def records(self, tool: str | None = None) -> list[dict[str, Any]]:
        """What the stand-ins received so far (optionally of one tool)."""
        return [r for r in read_records(self.record) if tool is None or r["tool"] == tool]

    def env(self) -> dict[str, str]:
        """Variables steering the stand-ins (the deployment's ``env:``)."""
        return {
            "STANDIN_RECORD": str(self.record),
            "STANDIN_MODE_FILE": str(self.mode_file),
            # ROOT for the stand-ins' helpers; then what the checkout's own environment would provide.
            "PYTHONPATH": os.pathsep.join([str(ROOT), *self.extra.get("pythonpath", [])]),
        }

    def script_entry(self, **overrides: Any) -> dict[str, Any]:
        """The deployment entry keys every SoulX back end takes."""
        entry = {
            "repo": str(self.repo),
            "ckpt_dir": str(self.ckpt_dir),
            "wav2vec_dir": str(self.wav2vec_dir),
            "python": sys.executable,
            "torchrun": str(self.torchrun),
            "ascend_env_script": str(self.env_script),
            "env": self.env(),
        }
        entry.update(overrides)
        return entry


def fake_checkout(root: Path, name: str, *, ckpt: str, wav2vec: str) -> FakeCheckout:
    """A checkout folder with weights folders, the fake set_env.sh and a fake torchrun."""
    repo = root / name
    (repo / "models" / ckpt).mkdir(parents=True, exist_ok=True)
    (repo / "models" / wav2vec).mkdir(parents=True, exist_ok=True)
    env_script = root / "ascend" / "set_env.sh"
    env_script.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(STANDINS / "set_env.sh", env_script)
    checkout = FakeCheckout(
        root=root,
        repo=repo,
        ckpt_dir=repo / "models" / ckpt,
        wav2vec_dir=repo / "models" / wav2vec,
        env_script=env_script,
        torchrun=wrapper(root / "bin" / "torchrun", STANDINS / "fake_torchrun.py"),
        record=root / f"{name}-received.jsonl",
        mode_file=root / f"{name}-mode.txt",
    )
    checkout.set_mode("ok")
    return checkout


def flashhead_checkout(root: Path) -> FakeCheckout:
    """SoulX-FlashHead with the stand-in generate_video.py."""
    checkout = fake_checkout(
        root, "SoulX-FlashHead", ckpt="SoulX-FlashHead-1_3B", wav2vec="wav2vec2-base-960h"
    )
    shutil.copyfile(STANDINS / "fake_generate_video.py", checkout.repo / "generate_video.py")
    return checkout


def flashtalk_checkout(root: Path) -> FakeCheckout:
    """SoulX-FlashTalk; the resident script is the stand-in speaking the same protocol."""
    checkout = fake_checkout(
        root, "SoulX-FlashTalk", ckpt="SoulX-FlashTalk-14B", wav2vec="chinese-wav2vec2-base"
    )
    checkout.extra["resident_script"] = str(STANDINS / "fake_flashtalk_resident.py")
    return checkout


def flashtalk_upstream_checkout(
    root: Path, *, frames: str | int = "new_frames_only", reads_env: bool = False, **infer_params: Any
) -> FakeCheckout:
    """SoulX-FlashTalk as a user clones it, with the fake upstream ``flash_talk`` package
    (tests/standins/fake_flash_talk) and jobservice's own resident script.

    ``frames``: what ``FlashTalkPipeline.generate`` returns ("new_frames_only" as upstream,
    "all_frames" as OmniRT's patched checkout, or a count); ``reads_env``: whether importing
    ``flash_talk.inference`` applies the FLASHTALK_* variables (OmniRT's patch) or not (upstream);
    ``infer_params``: values written over upstream's ``infer_params.yaml``.
    """
    checkout = fake_checkout(
        root, "SoulX-FlashTalk", ckpt="SoulX-FlashTalk-14B", wav2vec="chinese-wav2vec2-base"
    )
    package = checkout.repo / "flash_talk"
    shutil.copytree(
        STANDINS / "fake_flash_talk" / "flash_talk",
        package,
        ignore=shutil.ignore_patterns("__pycache__"),
        dirs_exist_ok=True,
    )
    yaml_path = package / "configs" / "infer_params.yaml"
    yaml_path.write_text(yaml.safe_dump({**yaml.safe_load(yaml_path.read_text()), **infer_params}))
    variant = {"frames": frames, "reads_env": reads_env}
    (package / "configs" / "standin_variant.json").write_text(json.dumps(variant))
    checkout.extra["resident_script"] = str(ROOT / "workers" / "adapters" / "soulx" / "flashtalk_resident.py")
    checkout.extra["pythonpath"] = [str(STANDINS / "checkout_site")]  # its librosa
    return checkout


def write_deployment(path: Path, data: dict[str, Any]) -> Path:
    """Write a deployment file (YAML, or TOML when the name ends in .toml)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".toml":
        raise ValueError("tests write YAML; TOML is parsed from literal text in the unit tests")
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path
