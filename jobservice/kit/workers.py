"""The worker workloads of a deployment file, as Kubernetes objects.

One StatefulSet per card group of the file (a StatefulSet, not a Deployment: its pods keep their
names across restarts, and a pod's name is its card group's id, ``JOBSERVICE_WORKER_NODE``, so a
restarted pod is the same group, not a new one beside a ghost). Each pod asks the device plugin for
the group's card count under the overlay's resource name; the plugin decides which cards, and the
container sees them numbered from 0, so the worker runs ``--devices <kind>:0-<n-1> --group <the
file's devices>``. Its stop grace covers its longest job (``jobservice.fleet.stopping``). Also: the
deployment file as a ConfigMap (mounted by every pod, the API and the beat too), the headless
Service the StatefulSets name, and, when the overlay asks, a KEDA ScaledObject per StatefulSet.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from jobservice.catalog import Catalog, WorkerGroup
from jobservice.families.deployment import DeploymentError, build_catalog
from jobservice.fleet.placement import parse_devices
from jobservice.fleet.stopping import stop_grace_seconds
from jobservice.kit.values import KitError, KitValues
from jobservice.settings import Settings

APP = "jobservice"
PREFIX = "jobservice-worker-"
HEADLESS = "jobservice-workers"
CONFIG = "jobservice-config"  # the settings every pod reads (deploy/kubernetes/base)
SECRETS = "jobservice-secrets"
DEPLOYMENT_CONFIGMAP = "jobservice-deployment"
DEPLOYMENT_DIR = "/etc/jobservice/deployment"
SECRETS_DIR = "/etc/jobservice/secrets"
VAR_DIR = "/var/lib/jobservice"
USER_ID = 10001  # the images' jobservice user (docker/*.Dockerfile)
CHECKSUM = "jobservice.io/deployment-file-sha256"  # a changed file rolls the workers


@dataclass(frozen=True)
class CardGroupPlan:
    """One card group of the file as one StatefulSet."""

    group: WorkerGroup
    name: str  # the StatefulSet's name
    kind: str  # cpu, cuda, npu
    cards: int
    container_devices: str  # what --devices says inside the container
    key: str  # --group: the file's name for it, or its devices
    grace_seconds: int
    work_weights: dict[str, float]  # model -> seconds of generation per second of output


def slug(group: WorkerGroup) -> str:
    """A DNS-label form of a group's name or devices: ``npu:4,5,6,7`` -> ``npu-4-7``."""
    if group.name:
        text = re.sub(r"[^a-z0-9]+", "-", group.name.lower()).strip("-")
        return text or "group"
    device = parse_devices(group.devices)
    if device.kind == "cpu":
        return "cpu"
    runs: list[str] = []
    indices = list(device.indices)
    start = prev = indices[0]
    for index in [*indices[1:], None]:
        if index is not None and index == prev + 1:
            prev = index
            continue
        runs.append(str(start) if start == prev else f"{start}-{prev}")
        if index is not None:
            start = prev = index
    return f"{device.kind}-{'-'.join(runs)}"


def container_devices(kind: str, cards: int) -> str:
    """The devices as a container given ``cards`` cards by a device plugin sees them."""
    if kind == "cpu":
        return "cpu"
    return f"{kind}:{','.join(str(i) for i in range(cards))}"


def plan(values: KitValues, *, catalog: Catalog, settings: Settings) -> list[CardGroupPlan]:
    """Every card group of the deployment file as a StatefulSet's plan, checked: a group on cards needs
    the device plugin's resource, names stay unique, model paths lie under a volume."""
    if not catalog.groups:
        raise KitError(f"{values.deployment_file}: no workers: groups to generate workers for")
    plans: list[CardGroupPlan] = []
    for group in catalog.groups:
        device = parse_devices(group.devices)
        if device.kind != "cpu" and not values.device_resource:
            raise KitError(f"group {group.devices} is on {device.kind} cards: kit.yaml needs device_resource")
        _check_paths(group, catalog, values)
        weights = {
            model: float(spec.seconds_per_output_second or 1.0)
            for model in group.models
            if (spec := catalog.get(model)) is not None
        }
        plans.append(
            CardGroupPlan(
                group=group,
                name=PREFIX + slug(group),
                kind=device.kind,
                cards=device.count,
                container_devices=container_devices(device.kind, device.count),
                key=group.name or group.devices,
                grace_seconds=stop_grace_seconds(
                    catalog, group.models, job_timeout_seconds=_job_timeout(values, settings)
                ),
                work_weights=weights,
            )
        )
    names = [p.name for p in plans]
    if len(set(names)) != len(names):
        raise KitError(f"two card groups make the same StatefulSet name: {sorted(names)}; name the groups")
    return plans


def _job_timeout(values: KitValues, settings: Settings) -> float:
    """The service's run limit as the workers will read it (kit.yaml's env may set it)."""
    given = values.env.get("JOBSERVICE_JOB_TIMEOUT_SECONDS")
    return float(given) if given else settings.job_timeout_seconds


def _check_paths(group: WorkerGroup, catalog: Catalog, values: KitValues) -> None:
    """Every path the group's models need lies under a model volume or in the image."""
    roots = [v.path for v in values.model_volumes] + list(values.image_paths)
    for model in group.models:
        spec = catalog.get(model)
        for key, path in spec.required_paths if spec else ():
            if not any(_under(path, root) for root in roots):
                raise KitError(
                    f"models.{model}.{key} = {path} lies under no model volume of kit.yaml "
                    f"(model_volumes, or image_paths for what the image carries)"
                )


def _under(path: str, root: str) -> bool:
    return PurePosixPath(path).is_relative_to(PurePosixPath(root))


def render(values: KitValues, *, settings: Settings | None = None) -> dict[str, list[dict[str, Any]]]:
    """The generated objects: ``{"workers.yaml": [...], "autoscaling/scaledobjects.yaml": [...]}``
    (the second only when kit.yaml asks for autoscaling)."""
    settings = settings or Settings(_env_file=None)  # type: ignore[call-arg]
    deployment = _deployment_path(values)
    try:
        catalog = build_catalog(deployment_file=deployment)
    except DeploymentError as exc:
        raise KitError(str(exc)) from None
    content = deployment.read_text(encoding="utf-8")
    checksum = hashlib.sha256(content.encode()).hexdigest()
    plans = plan(values, catalog=catalog, settings=settings)
    objects: list[dict[str, Any]] = [
        _deployment_configmap(deployment.name, content),
        _headless_service(),
    ]
    objects += [_statefulset(p, values, checksum=checksum) for p in plans]
    files = {"workers.yaml": objects}
    if values.autoscaling is not None:
        files["autoscaling/scaledobjects.yaml"] = [_scaledobject(p, values) for p in plans]
    return files


def _deployment_path(values: KitValues) -> Path:
    return (values.source.parent / values.deployment_file).resolve()


def deployment_key(values: KitValues) -> str:
    """The ConfigMap key (and file name) of the deployment file: ``deploy.yaml`` or ``deploy.toml``."""
    suffix = _deployment_path(values).suffix.lower()
    return "deploy.toml" if suffix == ".toml" else "deploy.yaml"


def _labels(component: str, **more: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": APP, "app.kubernetes.io/component": component, **more}


def _deployment_configmap(file_name: str, content: str) -> dict[str, Any]:
    key = "deploy.toml" if file_name.lower().endswith(".toml") else "deploy.yaml"
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": DEPLOYMENT_CONFIGMAP,
            "labels": _labels("config"),
            "annotations": {"jobservice.io/source": file_name},
        },
        "data": {key: content},
    }


def _headless_service() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": HEADLESS, "labels": _labels("worker")},
        "spec": {"clusterIP": "None", "selector": _labels("worker"), "ports": [{"name": "none", "port": 9}]},
    }


def migrate_container(image: str) -> dict[str, Any]:
    """The init container every jobservice pod runs first: ``jobservice db upgrade`` (serialised by
    an advisory lock on PostgreSQL, a no-op when the schema is current), so no pod of a new release
    serves or works before its schema is there."""
    return {
        "name": "migrate",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "args": ["jobservice", "db", "upgrade"],
        "envFrom": [{"configMapRef": {"name": CONFIG}}],
        "volumeMounts": [
            {"name": "secrets", "mountPath": SECRETS_DIR, "readOnly": True},
            {"name": "var", "mountPath": VAR_DIR},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "512Mi"}},
        "securityContext": container_security(),
    }


def container_security() -> dict[str, Any]:
    """What every jobservice container runs with: no privilege, a read-only root file system."""
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }


def _statefulset(p: CardGroupPlan, values: KitValues, *, checksum: str) -> dict[str, Any]:
    group_labels = _labels("worker", **{"jobservice.io/card-group-set": p.name.removeprefix(PREFIX)})
    requests = dict(values.requests)
    limits = dict(values.limits)
    if p.kind != "cpu" and values.device_resource:
        requests[values.device_resource] = str(p.cards)  # extended resources: requests == limits
        limits[values.device_resource] = str(p.cards)
    env = [
        {"name": "JOBSERVICE_WORKER_NODE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "JOBSERVICE_POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "JOBSERVICE_DEPLOYMENT_FILE", "value": f"{DEPLOYMENT_DIR}/{deployment_key(values)}"},
        *({"name": name, "value": value} for name, value in sorted(values.env.items())),
    ]
    mounts = [
        {"name": "var", "mountPath": VAR_DIR},
        {"name": "tmp", "mountPath": "/tmp"},
        {"name": "shm", "mountPath": "/dev/shm"},
        {"name": "deployment", "mountPath": DEPLOYMENT_DIR, "readOnly": True},
        {"name": "secrets", "mountPath": SECRETS_DIR, "readOnly": True},
        *({"name": v.name, "mountPath": v.path, "readOnly": True} for v in values.model_volumes),
    ]
    volumes: list[dict[str, Any]] = [
        {"name": "var", "emptyDir": {"sizeLimit": values.scratch_size}},
        {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}},
        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": values.shm_size}},
        {"name": "deployment", "configMap": {"name": DEPLOYMENT_CONFIGMAP}},
        {"name": "secrets", "secret": {"secretName": SECRETS, "defaultMode": 0o440}},
    ]
    for volume in values.model_volumes:
        if volume.claim:
            volumes.append(
                {"name": volume.name, "persistentVolumeClaim": {"claimName": volume.claim, "readOnly": True}}
            )
        else:
            volumes.append(
                {
                    "name": volume.name,
                    "hostPath": {"path": volume.host_path or volume.path, "type": "Directory"},
                }
            )
    security: dict[str, Any] = {
        "runAsNonRoot": True,
        "runAsUser": USER_ID,
        "runAsGroup": USER_ID,
        "fsGroup": USER_ID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    if values.supplemental_groups:
        security["supplementalGroups"] = list(values.supplemental_groups)
    pod: dict[str, Any] = {
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": p.grace_seconds,
        "securityContext": security,
        "initContainers": [migrate_container(values.image)],
        "containers": [
            {
                "name": "worker",
                "image": values.image,
                "imagePullPolicy": "IfNotPresent",
                "args": ["jobservice", "worker", "--devices", p.container_devices, "--group", p.key],
                "envFrom": [{"configMapRef": {"name": CONFIG}}],
                "env": env,
                "resources": {"requests": requests, **({"limits": limits} if limits else {})},
                "securityContext": container_security(),
                "volumeMounts": mounts,
            }
        ],
        "volumes": volumes,
    }
    if values.runtime_class:
        pod["runtimeClassName"] = values.runtime_class
    if values.node_selector:
        pod["nodeSelector"] = dict(values.node_selector)
    if values.tolerations:
        pod["tolerations"] = [dict(t) for t in values.tolerations]
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {
            "name": p.name,
            "labels": group_labels,
            "annotations": {
                "jobservice.io/card-group": p.group.devices,
                "jobservice.io/models": ",".join(p.group.models),
            },
        },
        "spec": {
            "serviceName": HEADLESS,
            "replicas": values.autoscaling.min_replicas if values.autoscaling else 1,
            "podManagementPolicy": "Parallel",  # each pod is its own card group: no order to keep
            "selector": {"matchLabels": group_labels},
            "template": {
                "metadata": {"labels": group_labels, "annotations": {CHECKSUM: checksum}},
                "spec": pod,
            },
        },
    }


def work_query(p: CardGroupPlan) -> str:
    """PromQL: the card-seconds of queued work the set's models hold (each model's queued output
    seconds, the same from every API pod, times its seconds of generation per output second)."""
    terms = [
        f'(max(jobservice_queue_output_seconds{{model="{model}"}}) or vector(0)) * {weight:g}'
        for model, weight in sorted(p.work_weights.items())
    ]
    return " + ".join(terms)


def _scaledobject(p: CardGroupPlan, values: KitValues) -> dict[str, Any]:
    scaling = values.autoscaling
    assert scaling is not None
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": p.name, "labels": _labels("autoscaling")},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": p.name},
            "minReplicaCount": scaling.min_replicas,
            "maxReplicaCount": scaling.max_replicas,
            "pollingInterval": 30,
            "cooldownPeriod": scaling.cooldown_seconds,
            "advanced": {
                "horizontalPodAutoscalerConfig": {
                    "behavior": {
                        # One pod at a time, and only after the backlog stayed low: a pod that goes
                        # drains its job (up to its grace) and its models' loads are lost.
                        "scaleDown": {
                            "stabilizationWindowSeconds": scaling.cooldown_seconds,
                            "policies": [{"type": "Pods", "value": 1, "periodSeconds": 600}],
                        }
                    }
                }
            },
            "triggers": [
                {
                    "type": "prometheus",
                    "metricType": "AverageValue",
                    "metadata": {
                        "serverAddress": scaling.prometheus,
                        "query": work_query(p),
                        "threshold": f"{scaling.target_work_seconds:g}",
                    },
                }
            ],
        },
    }
