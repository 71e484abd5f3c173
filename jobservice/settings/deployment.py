"""Settings of the model catalog: which models run and where (jobservice.families.deployment,
jobservice.wiring)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field


class DeploymentSettings(BaseModel):
    """Models: the deployment file.

    Read when the catalog is built (`jobservice.wiring.build_services`, `jobservice.families.deployment`):
    the built-in reference models, plus the real models a deployment file enables.
    """

    deployment_file: Path | None = Field(
        default=None,
        description="YAML or TOML naming the enabled real models, their paths and endpoints, and the "
        "card groups of the workers (docs/deployment.md#the-deployment-file).",
    )
    catalog_extra: list[str] = Field(
        default_factory=list,
        description="`module:function` providers of extra ModelSpecs (tests, plugins); a JSON list.",
    )
