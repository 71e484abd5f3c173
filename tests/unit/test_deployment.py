"""Deployment files: the shipped examples, path resolution, parameter defaults, card groups, and
errors that name the file and the bad key."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from jobservice.families.deployment import DeploymentError, build_catalog, load_deployment
from jobservice.fleet.placement import parse_devices, servable_models
from jobservice.jobs.submit import validate_params
from tests.conftest import ROOT

ASCEND = ROOT / "deploy" / "ascend-910b-8card.yaml"
CUDA = ROOT / "deploy" / "cuda-2gpu.toml"
FLASHHEAD = {"repo": "fh", "ckpt_dir": "fh/models/ckpt", "wav2vec_dir": "fh/models/w2v"}


def write(tmp_path: Path, data: dict[str, Any], name: str = "deploy.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


def error_of(tmp_path: Path, data: dict[str, Any]) -> str:
    with pytest.raises(DeploymentError) as failure:
        load_deployment(write(tmp_path, data))
    return str(failure.value)


def test_the_ascend_example_enables_the_three_families_on_their_card_groups() -> None:
    catalog = build_catalog(deployment_file=ASCEND)
    assert catalog.ids() == ["soulx-flashhead-1.3b", "soulx-flashtalk-14b", "wan2.1-t2v-1.3b"]
    every = ("wan2.1-t2v-1.3b", "soulx-flashhead-1.3b", "soulx-flashtalk-14b")
    assert [(g.devices, g.models) for g in catalog.groups] == [("npu:0,1,2,3", every), ("npu:4,5,6,7", every)]
    head, talk, wan = (catalog.get(i) for i in catalog.ids())
    assert head is not None and talk is not None and wan is not None
    assert {s.maturity for s in (head, talk, wan)} == {"contract-tested"}
    assert (head.execution_mode, talk.execution_mode, wan.execution_mode) == (
        "subprocess",
        "persistent_worker",
        "resident",  # the worker starts its server (serve_command): resident like FlashTalk's
    )
    assert (head.cards, talk.cards, head.min_memory_gb, talk.min_memory_gb) == (2, 4, 48, 56)
    assert (talk.memory_scope, talk.load_seconds, wan.load_seconds) == ("per_card", 88.4, 210)
    assert head.devices == ("cuda", "npu") and head.timeout_seconds == 900
    assert catalog.default_for("audio2video") is talk and catalog.default_for("text2video") is wan
    assert ("ascend_env_script", "/usr/local/Ascend/ascend-toolkit/set_env.sh") in head.required_paths
    assert wan.config["serve_port"] == 8023 and wan.config["serve_command"][:3] == [
        "vllm-omni",
        "serve",
        "/data/models/Wan2.1-T2V-1.3B-Diffusers",
    ]


def test_the_cuda_example_reads_as_toml() -> None:
    catalog = build_catalog(deployment_file=CUDA)
    assert catalog.ids()[:2] == ["reference-talking-head", "reference-t2v"]
    wan = catalog.get("wan2.1-t2v-1.3b")
    assert wan is not None and wan.backend == "diffusers" and wan.execution_mode == "resident"
    assert wan.memory_scope == "per_card" and wan.requires[-3:] == ("diffusers", "transformers", "accelerate")
    omnirt = catalog.get("omnirt")
    assert omnirt is not None and omnirt.params.model_json_schema()["properties"]["omnirt_model"][
        "const"
    ] == ("soulx-flashhead-1.3b")
    assert validate_params(omnirt, {})["config"] == {"model_type": "lite"}


def test_a_group_serves_only_what_fits_and_says_why() -> None:
    catalog = build_catalog(deployment_file=ASCEND)
    reasons = servable_models(catalog, parse_devices("npu:2,3"))
    assert reasons["soulx-flashtalk-14b"] == "needs 4 cards, this worker has 2"
    reason = str(reasons["soulx-flashhead-1.3b"])
    assert "not found on this host: repo" in reason and "/opt/" not in reason  # keys, never paths
    assert reasons["wan2.1-t2v-1.3b"] is None, "an HTTP client needs no local files"
    assert (
        "runs on cuda, npu, not cpu" == servable_models(catalog, parse_devices("cpu"))["soulx-flashhead-1.3b"]
    )


def test_relative_paths_resolve_against_the_file(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    entry = {
        **FLASHHEAD,
        "python": "venv/bin/python",
        "torchrun": "torchrun",
        "ascend_env_script": "../set_env.sh",
    }
    spec = load_deployment(write(site, {"models": {"soulx-flashhead-1.3b": entry}})).specs()[0]
    assert spec.config["repo"] == str(site / "fh") and spec.config["ckpt_dir"] == str(site / "fh/models/ckpt")
    assert spec.config["python"] == str(site / "venv/bin/python"), "a command with a slash is a path"
    assert spec.config["torchrun"] == "torchrun", "a bare command is looked up on PATH when run"
    assert spec.config["ascend_env_script"] == str(site / "../set_env.sh")


def test_defaults_change_the_schema_the_api_validates_against(tmp_path: Path) -> None:
    entry = {**FLASHHEAD, "defaults": {"sample_steps": 4, "latent_carry": True}}
    spec = load_deployment(write(tmp_path, {"models": {"soulx-flashhead-1.3b": entry}})).specs()[0]
    schema = spec.params.model_json_schema()["properties"]
    assert schema["sample_steps"]["default"] == 4 and schema["sample_steps"]["maximum"] == 50
    resolved = validate_params(spec, {"seed": "5"})
    assert resolved == {
        "seed": 5,
        "model_type": "pro",
        "audio_encode_mode": "stream",
        "sample_steps": 4,
        "vae_2d_split": True,
        "latent_carry": True,
        "npu_fusion_attention": True,
    }


def test_flashtalk_presets_resolve_at_the_api(tmp_path: Path) -> None:
    entry = {**FLASHHEAD, "cards": 4}
    spec = load_deployment(write(tmp_path, {"models": {"soulx-flashtalk-14b": entry}})).specs()[0]
    realtime = validate_params(spec, {})
    assert (realtime["height"], realtime["width"], realtime["frame_num"], realtime["motion_frames_num"]) == (
        704,
        416,
        29,
        1,
    )
    assert (realtime["sample_steps"], realtime["color_correction_strength"]) == (2, 0.0)
    quality = validate_params(spec, {"preset": "quality", "sample_steps": "3"})
    assert (quality["height"], quality["frame_num"], quality["sample_steps"]) == (768, 33, 3)
    from jobservice.errors import DomainError

    with pytest.raises(DomainError) as bad:
        validate_params(spec, {"frame_num": 30})
    assert bad.value.code == "invalid_parameters" and "4k+1" in bad.value.message


def test_group_overrides_are_checked_and_applied(tmp_path: Path) -> None:
    data: dict[str, Any] = {
        "models": {"wan2.1-t2v-1.3b": {"endpoints": ["http://a:8023", "http://b:8023"]}},
        "workers": [
            {
                "devices": "npu:0,1",
                "models": ["wan2.1-t2v-1.3b"],
                "config": {"wan2.1-t2v-1.3b": {"endpoints": ["http://a:8023"]}},
            },
            {"devices": "cpu", "models": ["wan2.1-t2v-1.3b"]},
        ],
    }
    catalog = build_catalog(deployment_file=write(tmp_path, data))
    spec = catalog.get("wan2.1-t2v-1.3b")
    assert spec is not None
    assert catalog.config_for(spec, "npu:0,1")["endpoints"] == ["http://a:8023"]
    assert catalog.config_for(spec, "cpu")["endpoints"] == ["http://a:8023", "http://b:8023"]
    data["workers"][0]["config"] = {"wan2.1-t2v-1.3b": {"endpoints": ["ftp://a"]}}
    assert (
        "workers[0] (npu:0,1).config.wan2.1-t2v-1.3b: endpoints: Value error, 'ftp://a' is not an http(s) URL"
        in error_of(tmp_path, data)
    )


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"models": {"soulx-flashhead-1.3b": {**FLASHHEAD, "launchr": "torchrun"}}},
            "models.soulx-flashhead-1.3b.launchr: Extra inputs are not permitted",
        ),
        (
            {"models": {"soulx-flashhead-1.3b": {**FLASHHEAD, "launcher": "mpirun"}}},
            "models.soulx-flashhead-1.3b.launcher: Input should be 'auto', 'python' or 'torchrun'",
        ),
        (
            {"models": {"soulx-flashhead-1.3b": {"ckpt_dir": "x", "wav2vec_dir": "y"}}},
            "models.soulx-flashhead-1.3b.repo: Field required",
        ),
        (
            {"models": {"my-model": {"endpoints": ["http://x"]}}},
            "models.my-model: Unable to extract tag using discriminator 'backend'",
        ),
        (
            {"models": {"wan2.1-t2v-1.3b": {"endpoints": []}}},
            "models.wan2.1-t2v-1.3b: Value error, give endpoints (servers you run) or serve_command",
        ),
        (
            {"models": {"omnirt": {"mode": "server"}}},
            "models.omnirt: Value error, endpoint is required when mode is server",
        ),
        (
            {"models": {"soulx-flashhead-1.3b": {**FLASHHEAD, "defaults": {"sample_steps": 0}}}},
            "models.soulx-flashhead-1.3b: default for 'sample_steps': Input should be greater than or equal to 1",
        ),
        (
            {"models": {"soulx-flashhead-1.3b": {**FLASHHEAD, "defaults": {"steps": 2}}}},
            "models.soulx-flashhead-1.3b: 'steps' is not a parameter of this model",
        ),
        (
            {"models": {"wan2.1-t2v-1.3b": {"endpoints": ["http://x"], "defaults": {"num_frames": 80}}}},
            "models.wan2.1-t2v-1.3b: defaults: Value error, num_frames must be 4k+1",
        ),
        (
            {"models": {"soulx-flashhead-1.3b": {**FLASHHEAD, "validation": {"frame_tolerance": -1}}}},
            "models.soulx-flashhead-1.3b.validation: frame_tolerance: Input should be greater than or equal to 0",
        ),
        (
            {"workers": [{"devices": "npu:x", "models": ["reference-t2v"]}]},
            "workers.0.devices: Value error, cannot read devices 'npu:x'",
        ),
        (
            {"workers": [{"devices": "npu:0", "models": ["soulx-flashhead-1.3b"]}]},
            "workers[0] (npu:0).models: 'soulx-flashhead-1.3b' is not an enabled model",
        ),
        (
            {
                "models": {"soulx-flashhead-1.3b": {**FLASHHEAD, "cards": 2}},
                "workers": [{"devices": "npu:2", "models": ["soulx-flashhead-1.3b"]}],
            },
            "needs 2 cards, the group has 1",
        ),
        (
            {
                "workers": [
                    {"devices": "npu:0-3", "models": ["reference-t2v"]},
                    {"devices": "npu:3,4", "models": ["reference-t2v"]},
                ]
            },
            "workers[1] (npu:3,4).devices: npu:3 is also in npu:0,1,2,3",
        ),
        (
            {"default_models": {"text2video": "wan"}},
            "default_models.text2video: 'wan' is not an enabled model",
        ),
        ({"modles": {}}, "modles: Extra inputs are not permitted"),
    ],
)
def test_errors_name_the_file_and_the_key(tmp_path: Path, data: dict[str, Any], message: str) -> None:
    text = error_of(tmp_path, data)
    assert text.startswith(str(tmp_path / "deploy.yaml")) and message in text, text


def test_a_disabled_model_is_not_in_the_catalog(tmp_path: Path) -> None:
    data = {"models": {"soulx-flashhead-1.3b": {**FLASHHEAD, "enabled": False}}}
    assert "soulx-flashhead-1.3b" not in build_catalog(deployment_file=write(tmp_path, data)).ids()


def test_missing_file_and_bad_syntax(tmp_path: Path) -> None:
    with pytest.raises(DeploymentError, match="no such deployment file"):
        load_deployment(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[models\n")
    with pytest.raises(DeploymentError, match="cannot read it"):
        load_deployment(bad)


def test_the_api_process_never_imports_torch_with_a_deployment() -> None:
    code = (
        "import sys\n"
        "from jobservice.http.app import create_app\n"
        "from jobservice.settings import Settings\n"
        f"app = create_app(Settings(_env_file=None, auth='off', var_dir='/tmp/jobservice-notorch', deployment_file={str(CUDA)!r}))\n"
        "assert app.test_client().get('/models').status_code == 200\n"
        "heavy = sorted(m for m in ('torch', 'diffusers', 'transformers', 'numpy') if m in sys.modules)\n"
        "print(heavy)\n"
        "assert not [m for m in heavy if m != 'numpy'], heavy\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_manuals_examples_are_valid_deployment_files(tmp_path: Path) -> None:
    page = (ROOT / "docs" / "deployment.md").read_text()
    section = page[page.index("\n## The deployment file\n") :]
    yaml_block = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    toml_block = section.split("```toml\n", 1)[1].split("```", 1)[0]
    (tmp_path / "a.yaml").write_text(yaml_block)
    (tmp_path / "c.toml").write_text(toml_block)
    ascend = build_catalog(deployment_file=tmp_path / "a.yaml")
    assert [g.devices for g in ascend.groups] == ["npu:0,1,2,3", "npu:4,5,6,7"]
    assert ascend.ids() == build_catalog(deployment_file=ASCEND).ids()
    cuda = build_catalog(deployment_file=tmp_path / "c.toml")
    assert [g.devices for g in cuda.groups] == ["cuda:0", "cuda:1"]
