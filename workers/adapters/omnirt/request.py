"""What the OmniRT adapter sends and what it accepts back, for both modes.

One request shape serves the CLI and the server: OmniRT's ``GenerateRequest``
(``omnirt/core/types.py``: ``{task, model, backend, inputs, config, adapters}``). ``omnirt serve``
takes it as the body of ``POST /v1/generate``; ``omnirt generate --config FILE`` reads it whole
with ``GenerateRequest.from_file`` and then ignores ``--task``, ``--model`` and every input flag
(``request_from_args`` in ``omnirt/cli/main.py``). A file, not flags, because flags cannot say
everything a deployment does: ``--npu-fusion-attention`` and ``--latent-carry`` can only turn a
switch on, and keys such as ``device`` have no flag at all.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jobservice.families.omnirt import (
    OMNIRT_REQUEST_CONFIG_KEYS,
    OmniRTEntry,
    omnirt_refusal,
    omnirt_refused_config_keys,
)
from workers.adapters.base import AdapterError, JobInputs
from workers.adapters.processes.child import last_lines
from workers.adapters.processes.memory import is_out_of_memory

# Our job parameters that OmniRT reads from the request's config (request_from_args), in the
# order a later source overrides: these, then the request's own config, then the deployment's.
PARAM_KEYS = (
    "seed",
    "width",
    "height",
    "num_frames",
    "fps",
    "num_inference_steps",
    "guidance_scale",
    "preset",
)
# text2video reads these as inputs, not config (request_from_args).
TEXT2VIDEO_INPUTS = ("num_frames", "fps")


def request_config(entry: OmniRTEntry, requested: dict[str, Any], *, model: str) -> dict[str, Any]:
    """The config sent to OmniRT: the request's keys, with the deployment's winning every key it sets.

    The API refuses keys off the allow-list (or off ``model``'s part of it) and keys of job parameters
    when a job is submitted; a job queued before those rules (or written to the queue by other
    means) is refused here too.
    """
    if not isinstance(requested, dict):
        raise AdapterError("invalid_parameters", "config must be a JSON object.")
    allowed = entry.request_keys(str(model))
    refused = omnirt_refused_config_keys(requested, allowed)
    if refused:
        raise AdapterError("invalid_parameters", omnirt_refusal(refused, allowed))
    return {**requested, **entry.config}


def task_of(inputs: JobInputs) -> str:
    """OmniRT's task for this job's inputs."""
    return "audio2video" if "audio" in inputs.files else "text2video"


def build_request(
    entry: OmniRTEntry,
    inputs: JobInputs,
    config: dict[str, Any],
    *,
    files: dict[str, str],
    output_dir: str,
) -> dict[str, Any]:
    """A whole OmniRT GenerateRequest. ``files`` are the input paths as OmniRT sees them
    (absolute), ``output_dir`` the folder it must write to, ``config`` the merged config."""
    params, task = inputs.params, task_of(inputs)
    request_inputs: dict[str, Any] = dict(files)
    for key in ("prompt", "negative_prompt"):
        if params.get(key):
            request_inputs[key] = params[key]
    merged: dict[str, Any] = {}
    for key in PARAM_KEYS:
        if params.get(key) is None:
            continue
        if task == "text2video" and key in TEXT2VIDEO_INPUTS:
            request_inputs[key] = params[key]
        else:
            merged[key] = params[key]
    merged.update(config)
    merged["output_dir"] = output_dir  # last: nobody else chooses where OmniRT writes
    return {
        "task": task,
        "model": params["omnirt_model"],
        "backend": entry.omnirt_backend,
        "inputs": request_inputs,
        "config": merged,
        "adapters": None,
    }


def confined(path: Path, folder: Path) -> Path:
    """``path`` if it lies inside ``folder`` (links resolved), else an error: an artifact is read
    back and stored as the job's video, so OmniRT (or whatever answers at its address) must not
    be able to hand us any other file this worker can read."""
    resolved, root = path.resolve(), folder.resolve()
    if not resolved.is_relative_to(root):
        raise AdapterError(
            "output_invalid", f"OmniRT reported an output outside the job's output folder: {path}"
        )
    return resolved


def public_report(metadata: dict[str, Any]) -> dict[str, Any]:
    """OmniRT's RunReport as we keep it: its ``config_resolved`` echoes the deployment's paths
    and launchers, which the API never publishes, so only the request-settable keys stay."""
    report = dict(metadata)
    resolved = report.get("config_resolved")
    if isinstance(resolved, dict):
        report["config_resolved"] = {k: v for k, v in resolved.items() if k in OMNIRT_REQUEST_CONFIG_KEYS}
    return report


def cli_failure(code: int, tail: str) -> AdapterError:
    """A non-zero exit of ``omnirt generate`` as a job error: 2 is OmniRT refusing the request
    (validation, a missing file, its memory budget), anything else a crash."""
    lines = last_lines(tail)
    if code == 2:
        if "InsufficientMemory" in tail or "insufficient memory" in tail.lower():
            return AdapterError(
                "insufficient_device_memory", f"OmniRT's memory budget check refused the run: {lines}"
            )
        if "output file missing" in tail:
            # The CLI exits 2 on any FileNotFoundError, also the one its export raises when the
            # script wrote nothing (FlashHead's pipeline.export): that is no refused request.
            return AdapterError("output_missing", f"OmniRT's model wrote no output (exit 2): {lines}")
        return AdapterError("request_rejected", f"OmniRT refused the request (exit 2): {lines}")
    if is_out_of_memory(tail):
        return AdapterError("out_of_memory", f"OmniRT ran out of device memory: {lines}")
    return AdapterError("model_crashed", f"omnirt exited with status {code}: {lines}")


def server_failure(job_id: str, state: str, message: str) -> AdapterError:
    """A server job that ended other than ``succeeded``, as a job error."""
    if is_out_of_memory(message):
        code = "out_of_memory"
    elif "output file missing" in message:
        code = "output_missing"
    else:
        code = "model_error"
    return AdapterError(code, f"OmniRT job {job_id} {state}: {message}")


def to_server(path: Path, entry: OmniRTEntry) -> str:
    """A local path as the OmniRT server sees it (``path_map``)."""
    text = str(path.resolve())
    for local, remote in entry.path_map.items():
        if text.startswith(local.rstrip("/") + "/"):
            return remote.rstrip("/") + text[len(local.rstrip("/")) :]
    return text


def from_server(text: str, entry: OmniRTEntry) -> Path:
    """A path the OmniRT server reported, as this host sees it."""
    for local, remote in entry.path_map.items():
        if text.startswith(remote.rstrip("/") + "/"):
            return Path(local.rstrip("/") + text[len(remote.rstrip("/")) :])
    return Path(text)
