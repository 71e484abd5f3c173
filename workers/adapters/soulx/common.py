"""What the SoulX back ends (FlashHead, FlashTalk) share: how a checkout's Python is launched over
the worker's cards, the child's environment, and turning a failed child into a clear job error."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path

from jobservice.families.flashhead import FlashHeadEntry
from jobservice.families.flashtalk import FlashTalkEntry
from jobservice.fleet.placement import DeviceContext, pinning_env
from jobservice.media.probe import ProbeError, decoded_seconds
from workers.adapters.base import AdapterError, JobInputs
from workers.adapters.processes.child import ENV_SCRIPT_FAILED, last_lines
from workers.adapters.processes.memory import is_out_of_memory
from workers.video.audio_cap import FALLBACK_MAX_AUDIO_S


@dataclass(frozen=True)
class Launch:
    """How to start a script of the checkout: ``prefix + [script, args...]``."""

    launcher: str  # "python" or "torchrun"
    nproc: int
    prefix: tuple[str, ...]


def resolve_launch(entry: FlashHeadEntry | FlashTalkEntry, device: DeviceContext) -> Launch:
    """python for one card, ``torchrun --nproc-per-node N`` over the group otherwise (or as configured)."""
    nproc = entry.nproc_per_node or device.count
    launcher = entry.launcher
    if launcher == "auto":
        launcher = "torchrun" if nproc > 1 else "python"
    if launcher == "python":
        return Launch("python", 1, (entry.python,))
    torchrun = entry.torchrun
    if torchrun is None:
        # The checkout's own torchrun (same venv as its python), else whatever is on PATH.
        sibling = Path(entry.python).parent / "torchrun"
        torchrun = str(sibling) if "/" in entry.python and sibling.exists() else "torchrun"
    # A free rendezvous port: two groups on one host must not both take torchrun's default 29500.
    return Launch(
        "torchrun", nproc, (torchrun, "--nproc-per-node", str(nproc), "--master-port", str(free_port()))
    )


def free_port() -> int:
    """A TCP port that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def child_env(device: DeviceContext, *model_env: dict[str, str]) -> dict[str, str]:
    """The worker's environment, pinned to its cards (set explicitly, as OmniRT learned to), unbuffered,
    plus the model's variables and the deployment's ``env:``."""
    env = dict(os.environ)
    env.update(pinning_env(device))
    env["PYTHONUNBUFFERED"] = "1"  # the log shows progress while it happens, not at exit
    for extra in model_env:
        env.update(extra)
    return env


def input_audio_duration(inputs: JobInputs) -> float:
    """Seconds of the job's speech: what the API measured when it checked the upload
    (``inputs.meta``), probing the file only when that is missing (e.g. a job queued without it)."""
    measured = (inputs.meta.get("audio") or {}).get("duration_s")
    if isinstance(measured, int | float) and not isinstance(measured, bool) and measured > 0:
        return float(measured)
    return audio_duration(inputs.files["audio"])


def audio_duration(path: Path) -> float:
    """Seconds of audio that ``path`` decodes to (not its header's claim), counted up to an hour."""
    try:
        duration = decoded_seconds(path, cap_s=FALLBACK_MAX_AUDIO_S)
    except ProbeError as exc:
        raise AdapterError("invalid_audio", f"The speech input cannot be read: {exc}") from exc
    if not duration:
        raise AdapterError("invalid_audio", "The speech input has no duration.")
    return float(duration)


def child_failure(
    *, what: str, code: int, log_tail: str, device: DeviceContext, env_script: Path | None
) -> AdapterError:
    """The job error for a child that exited with ``code`` (non-zero)."""
    lines = last_lines(log_tail)
    if is_out_of_memory(log_tail):
        return AdapterError("out_of_memory", f"{what} ran out of device memory on {device.label}: {lines}")
    if code == ENV_SCRIPT_FAILED and env_script is not None:
        return AdapterError(
            "model_load_failed", f"Sourcing {env_script} failed before {what} started: {lines}"
        )
    if code < 0:
        return AdapterError(
            "model_crashed",
            f"{what} was killed by signal {-code} (SIGKILL often means the host ran out of memory): {lines}",
        )
    return AdapterError("model_crashed", f"{what} exited with status {code}: {lines}")
