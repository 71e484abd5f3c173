"""Wan2.1 text2video on vLLM-Omni: a pool of ``vllm-omni serve`` instances, one job at a time each
(the form fields of ``POST /v1/videos``); the worker side is ``workers/adapters/vllm_omni.py``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from jobservice.backends.entry import EntryBase
from jobservice.backends.family import Family, register
from jobservice.backends.params import WanParams
from jobservice.catalog import ValidationPolicy


class VllmOmniEntry(EntryBase):
    """vLLM-Omni: a pool of ``vllm-omni serve`` instances, each running one job at a time."""

    backend: Literal["vllm-omni"]
    endpoints: list[str] = Field(min_length=1, description="Base URLs, e.g. http://10.0.0.5:8023.")
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
        devices=("cpu", "cuda", "npu"),
        requires=("requests",),
        min_memory_gb=None,  # the server owns the cards; it reports its own peak memory
        policy=ValidationPolicy(),
    )
)
