"""Wan2.1 text2video on vLLM-Omni: a pool of ``vllm-omni serve`` instances, one job at a time each
(the form fields of ``POST /v1/videos``); the worker side is ``workers/adapters/vllm_omni.py``.

Either the operator runs the servers (``endpoints``: they stay where they are, and the fleet gives
them no memory of the worker's cards), or the worker starts one on its own cards
(``serve_command``): the server is then the model resident on that group, loaded when the group
takes its first job and stopped when the group evicts it, placed by the fleet like FlashTalk's.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from jobservice.catalog import ValidationPolicy
from jobservice.families.entry import EntryBase
from jobservice.families.family import Family, register
from jobservice.families.params import WanParams


class VllmOmniEntry(EntryBase):
    """vLLM-Omni: a pool of ``vllm-omni serve`` instances, each running one job at a time."""

    backend: Literal["vllm-omni"]
    endpoints: list[str] = Field(
        default_factory=list, description="Base URLs of servers the operator runs, e.g. http://10.0.0.5:8023."
    )
    serve_command: list[str] | None = Field(
        default=None,
        description="Instead of endpoints: the argv that starts a server on the worker's own cards, e.g. "
        "[vllm, serve, /data/models/Wan2.1-T2V-1.3B-Diffusers, --omni, --port, '{port}']; `{port}` becomes "
        "serve_port. The worker waits for its /health, and stops it when the fleet evicts the model.",
    )
    serve_port: int = Field(default=8023, ge=1, le=65535, description="Port of the worker's own server.")
    serve_startup_timeout: float = Field(default=900.0, gt=0, description="Seconds to wait for /health.")
    served_model: str | None = Field(default=None, description="Sent as the model field (must match).")
    mode: Literal["async", "sync"] = Field(
        default="async",
        description="async: POST /v1/videos + poll + /content; sync: /v1/videos/sync (<600 s).",
    )
    poll_interval: float = Field(default=2.0, gt=0, le=60)
    api_key: str | None = None
    acquire_timeout: float | None = Field(default=None, gt=0, description="Wait for an idle instance.")

    @field_validator("endpoints")
    @classmethod
    def _urls(cls, value: list[str]) -> list[str]:
        for url in value:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"'{url}' is not an http(s) URL")
        return [url.rstrip("/") for url in value]

    @model_validator(mode="after")
    def _servers(self) -> VllmOmniEntry:
        if not self.endpoints and not self.serve_command:
            raise ValueError("give endpoints (servers you run) or serve_command (the worker starts one)")
        if self.endpoints and self.serve_command:
            raise ValueError("give endpoints or serve_command, not both")
        return self


def _mode(entry: Any, default: str) -> str:
    """A server the worker starts on its cards is resident there; one the operator runs is not."""
    return "resident" if getattr(entry, "serve_command", None) else default


class VllmWanParams(WanParams):
    """Wan2.1 on a vLLM-Omni server: the form fields of POST /v1/videos."""

    flow_shift: float | None = Field(default=None, ge=0.0, le=20.0, description="Default: the server's.")


FAMILY = register(
    Family(
        name="vllm-omni",
        entry=VllmOmniEntry,
        params=lambda _entry, _task: VllmWanParams,
        known_models=("wan2.1-t2v-1.3b",),
        adapter="workers.adapters.vllm_omni:VllmOmniAdapter",
        task="text2video",
        title="Wan2.1 T2V 1.3B on vLLM-Omni",
        summary="Wan2.1 text2video served by a pool of vLLM-Omni instances (one job at a time each).",
        execution_mode="http",
        mode_of=_mode,
        devices=("cpu", "cuda", "npu"),
        requires=("requests",),
        min_memory_gb=None,  # the server owns the cards; it reports its own peak memory
        policy=ValidationPolicy(),
    )
)
