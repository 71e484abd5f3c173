"""Settings of a worker process: its cards, models and card group (the workers/ package, which
jobservice may not import, and `jobservice worker`)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field


class WorkerSettings(BaseModel):
    """Workers.

    Read by a worker process (`workers.bootstrap`, `workers.runtime`, a run's pipeline) and by
    `jobservice worker`, which starts one. Its options (`--devices`, `--models`, `--name`,
    `--memory-gb`, `--preload`) hand the Celery process the worker_* values marked "set by
    `jobservice worker`".
    """

    worker_devices: str = Field(
        default="cpu",
        description="The worker's cards: cpu, cuda:0, cuda:0,1, npu:2,3 ... (`jobservice worker --devices`).",
    )
    worker_models: list[str] = Field(
        default_factory=list,
        description="Restrict a worker to these models, a JSON list; empty: its card group's models, or "
        "every model its cards can serve. Set by `jobservice worker` (`--models`).",
    )
    worker_group: str | None = Field(
        default=None,
        description="The deployment file's card group this worker runs: its name, or (unnamed) its devices "
        "as the file writes them, canonical (npu:4,5,6,7). Set by `jobservice worker` (`--group`).",
    )
    worker_node: str | None = Field(
        default=None,
        description="The card group's id (its row, its queue), stable across restarts: a Kubernetes "
        "worker sets its pod's name, a compose worker its service and host; unset: <devices>@<hostname>. "
        "`jobservice worker --name` overrides it.",
    )
    pod_name: str | None = Field(
        default=None,
        description="The Kubernetes pod a worker runs in (the downward API's metadata.name; the kit sets "
        "it): the `pod` label of jobservice_group_info, which joins the DCGM or NPU exporter's per-pod "
        "metrics to card groups.",
    )
    worker_memory_gb: float | None = Field(
        default=None,
        gt=0,
        description="Memory of each of the worker's cards in GB, when the deployment file's group does not "
        "say it and the cards cannot tell (a CPU worker that should hold only what fits; `--memory-gb`).",
    )
    worker_preload: bool = Field(
        default=False,
        description="Load the worker's models when it starts rather than on their first job. Set by "
        "`jobservice worker` (`--preload`).",
    )
    worker_skipped: dict[str, str] = Field(
        default_factory=dict,
        description="Models the worker was asked for but cannot serve, with why (a JSON object shown by "
        "/models and /readyz). Set by `jobservice worker`.",
    )
    worker_overlap_finish: bool = Field(
        default=True,
        description="Finish a generated job (encoder flush, output gate, upload, record) on a "
        "background thread while the card generates the next one; false: one job at a time, start to end.",
    )
    preview_interval_seconds: float = Field(
        default=3.0,
        ge=0,
        description="A job whose model streams its frames publishes what it has rendered so far as a "
        "preview (links.preview, the stream's preview event) at most this often, the first as soon as "
        "its first frames are out; 0: no previews.",
    )
    torch_threads: int | None = Field(
        default=None, ge=1, description="torch's CPU threads in each worker process; unset: torch's default."
    )
    scratch_dir: Path | None = Field(
        default=None, description="Per-job scratch space of a worker; unset: var_dir/scratch."
    )
    card_health_interval_seconds: float = Field(
        default=15.0,
        gt=0,
        description="How often a worker reads its cards' health (NVML, else nvidia-smi; npu-smi): a card "
        "that is not healthy makes its group unhealthy (it takes no job) until the card is healthy again.",
    )
