"""Same work as a peer: the FlashHead stand-in (tests/standins/fake_generate_video.py, the real
flags, sleeping for its compute and writing a real 512x512 video with ffmpeg) run three ways:

* alone: ``python generate_video.py <the flags jobservice used>``, timed from outside;
* by jobservice: a real worker's claim -> succeeded, with the full output gate (file mode);
* by OmniRT 0.1.0: ``omnirt generate --config request.json --json`` (cpu-stub backend, its
  FlashHead model pointed at the same checkout), timed from outside, as a user would run it.

same_work_ratio = median(jobservice claim -> succeeded) / median(stand-in alone), and
omnirt_same_work_ratio = median(omnirt generate wall) / the same, runs alternating.
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from scripts.bench_lib.stack import BenchStack  # noqa: E402
from tests.standins.deploy import FakeCheckout, flashhead_checkout, write_deployment  # noqa: E402

MODEL = "soulx-flashhead-1.3b"
SPEECH_SECONDS = 13.0  # 13 s at 25 fps, 512x512: the clip of the file-mode QC figure
COMPUTE_SECONDS = 6.5  # the stand-in's sleep: half real time


@dataclass
class SameWorkSite:
    """A stand-in FlashHead checkout and a deployment serving it beside the reference models."""

    root: Path
    checkout: FakeCheckout
    deployment: Path
    speech: Path
    stages: list[dict[str, float]] = field(default_factory=list)

    @classmethod
    def create(cls, compute_s: float = COMPUTE_SECONDS) -> SameWorkSite:
        """Make the checkout, a 16 kHz speech clip and the deployment file."""
        root = Path(tempfile.mkdtemp(prefix="jobservice-samework-"))
        checkout = flashhead_checkout(root / "site")
        entry = checkout.script_entry(timeout=300)
        for key in ("torchrun", "ascend_env_script"):  # one card: plain python, no Ascend toolkit
            entry.pop(key)
        entry["env"]["STANDIN_COMPUTE_S"] = f"{compute_s:g}"
        entry["validation"] = {"frame_tolerance": 4, "duration_tolerance_seconds": 0.2}
        deployment = write_deployment(
            root / "deploy.yaml", {"reference_models": True, "models": {MODEL: entry}}
        )
        speech = root / "speech.wav"
        subprocess.run(
            ["ffmpeg", "-v", "error", "-y", "-stream_loop", "4", "-i", str(ROOT / "samples/speech.wav")]
            + ["-t", f"{SPEECH_SECONDS:g}", "-ac", "1", "-ar", "16000", str(speech)],
            check=True,
        )
        return cls(root=root, checkout=checkout, deployment=deployment, speech=speech)

    @property
    def worker(self) -> tuple[str, list[str]]:
        """The worker serving the stand-in: one (fake) NPU card, as FlashHead does not run on CPUs."""
        return ("npu:0", [MODEL])

    def close(self) -> None:
        """Remove the checkout."""
        shutil.rmtree(self.root, ignore_errors=True)

    # --- the three ways ------------------------------------------------------------------
    def run_ours(self, stack: BenchStack, seed: int) -> tuple[float, list[str]]:
        """One job through jobservice: (claim -> succeeded in ms, the script's argv); keeps the
        report's process_ms (the script's run as the worker saw it) and validate_ms."""
        job_id = stack.submit_a2v(
            image=ROOT / "samples/portrait.png",
            audio=self.speech,
            fields={"model": MODEL, "seed": seed},
        )
        job = stack.wait(job_id)
        assert job["status"] == "succeeded", job
        report = stack.report(job_id)
        assert report["validation"]["mode"] == "file" and report["validation"]["verdict"] == "passed"
        _, claimed, finished = stack.row_times(job_id)
        self.stages.append({k: report["timings"].get(k, 0.0) for k in ("process_ms", "validate_ms")})
        return (finished - claimed).total_seconds() * 1000, list(report["extra"]["launch"]["argv"])

    def run_alone(self, argv: list[str], seed: int) -> float:
        """The script by itself with the same flags (fresh inputs and output): its wall in ms."""
        folder = self.root / f"alone-{seed}"
        folder.mkdir(parents=True, exist_ok=True)
        image = folder / "portrait.png"
        shutil.copyfile(ROOT / "samples/portrait.png", image)
        own = list(argv)
        swaps = {"--cond_image": image, "--audio_path": self.speech, "--save_file": folder / "out.mp4"}
        for flag, value in swaps.items():
            own[own.index(flag) + 1] = str(value)
        env = {**_base_env(), **self._entry_env()}
        started = time.perf_counter()
        subprocess.run(own, cwd=self.checkout.repo, env=env, check=True, capture_output=True)
        wall = (time.perf_counter() - started) * 1000
        assert (folder / "out.mp4").stat().st_size > 0
        return wall

    def run_omnirt(self, python: Path, seed: int) -> float:
        """``omnirt generate`` of the same request, timed from outside: its wall in ms."""
        folder = self.root / f"omnirt-{seed}"
        (folder / "out").mkdir(parents=True, exist_ok=True)
        config = {
            "repo_path": str(self.checkout.repo),
            "ckpt_dir": "models/SoulX-FlashHead-1_3B",
            "wav2vec_dir": "models/wav2vec2-base-960h",
            "python_executable": sys.executable,
            "launcher": "python",
            "seed": seed,
            "output_dir": str(folder / "out"),
        }
        request = {
            "task": "audio2video",
            "model": MODEL,
            "backend": "cpu-stub",
            "inputs": {"image": str(ROOT / "samples/portrait.png"), "audio": str(self.speech)},
            "config": config,
            "adapters": None,
        }
        (folder / "request.json").write_text(json.dumps(request))
        argv = [str(python), "-m", "omnirt", "generate", "--config", str(folder / "request.json"), "--json"]
        env = {**_base_env(), **self._entry_env(), "OMNIRT_LOG_PATH": str(folder / "events.log")}
        started = time.perf_counter()
        done = subprocess.run(argv, cwd=folder, env=env, capture_output=True, text=True)
        wall = (time.perf_counter() - started) * 1000
        assert done.returncode == 0, done.stderr[-2000:]
        assert any(p.suffix == ".mp4" for p in (folder / "out").rglob("*")), "OmniRT wrote no video"
        return wall

    def _entry_env(self) -> dict[str, str]:
        """The deployment entry's env: where the stand-in records, its mode, its compute time."""
        return _deployment_env(self.deployment)

    def measure(self, stack: BenchStack, *, runs: int, omnirt: bool) -> dict[str, Any]:
        """Alternate the ways ``runs`` times (after one warm-up each); the ratios of the medians."""
        python = _omnirt_python() if omnirt else None
        _, argv = self.run_ours(stack, seed=1)  # warm-up: the first job of a model loads it
        self.run_alone(argv, seed=1)
        ours, alone, peer = [], [], []
        for i in range(runs):
            seed = 10 + i
            took, argv = self.run_ours(stack, seed)
            ours.append(took)
            alone.append(self.run_alone(argv, seed))
            if python is not None:
                peer.append(self.run_omnirt(python, seed))
        base = statistics.median(alone)
        measured = self.stages[-runs:]
        result: dict[str, Any] = {
            "same_work_ratio": round(statistics.median(ours) / base, 4),
            "standin_ms_median": round(base, 1),
            "ours_claim_to_succeeded_ms_median": round(statistics.median(ours), 1),
            # Where ours goes: the script as the worker ran it, and the file gate after it.
            "ours_process_ms_median": round(statistics.median(m["process_ms"] for m in measured), 1),
            "ours_file_gate_ms_median": round(statistics.median(m["validate_ms"] for m in measured), 1),
            "same_work_runs_ms": {"ours": [round(x) for x in ours], "alone": [round(x) for x in alone]},
        }
        if peer:
            result["omnirt_same_work_ratio"] = round(statistics.median(peer) / base, 4)
            result["omnirt_generate_ms_median"] = round(statistics.median(peer), 1)
            result["same_work_runs_ms"]["omnirt"] = [round(x) for x in peer]
        return result


def _deployment_env(deployment: Path) -> dict[str, str]:
    import yaml

    data = yaml.safe_load(deployment.read_text())
    return dict(data["models"][MODEL]["env"])


def _base_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("JOBSERVICE_")} | {
        "PYTHONUNBUFFERED": "1"
    }


def _omnirt_python() -> Path:
    """The omnirt 0.1.0 venv (built once by tests/standins/omnirt_real.py; pip from PyPI)."""
    from tests.standins.omnirt_real import ensure_venv

    return ensure_venv()
