"""The Kubernetes kit (deploy/kubernetes): every overlay renders and passes the API's schemas, the
generated workers match their deployment files, and everything a pod, a rule or a scaler names exists.

No cluster runs here: the objects are checked, never applied. ``kubectl kustomize`` renders the
overlays where kubectl is installed (these machines and CI); without it the generator's own output is
still validated (``test_generated_workers_*``), as on a fresh Debian machine.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any, Literal

import kubernetes_validate
import pytest
import yaml
from pydantic import BaseModel, ConfigDict, Field

from jobservice.families.deployment import build_catalog
from jobservice.fleet.placement import parse_devices
from jobservice.fleet.stopping import stop_grace_seconds
from jobservice.http.api.policy.cross_site import allowed_hosts, host_allowed, host_name
from jobservice.kit import files as kit_files
from jobservice.kit.values import KitError, KitValues, load_values
from jobservice.kit.workers import render, work_query
from jobservice.settings import Settings
from tests.conftest import ROOT
from tests.metrics.test_dashboard import PROMQL_WORDS, exported_series, names_in

KIT = ROOT / "deploy" / "kubernetes"
OVERLAYS = sorted(p for p in (KIT / "overlays").iterdir() if (p / "kit.yaml").exists())
KUBERNETES_VERSION = "1.30.0"  # the oldest minor the kit is checked against (kubernetes-validate's schemas)
CRD_GROUPS = ("monitoring.coreos.com/", "keda.sh/")
KUBECTL = shutil.which("kubectl")
needs_kubectl = pytest.mark.skipif(
    KUBECTL is None, reason="kubectl renders the overlays where it is installed"
)
DEFAULT_TIMEOUT = Settings.model_fields["job_timeout_seconds"].default


def kustomize(folder: Path) -> list[dict[str, Any]]:
    """``kubectl kustomize folder``, as objects."""
    assert KUBECTL is not None
    done = subprocess.run([KUBECTL, "kustomize", str(folder)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


@cache
def rendered(overlay: Path) -> tuple[dict[str, Any], ...]:
    return tuple(kustomize(overlay))


def generated(overlay: Path) -> list[dict[str, Any]]:
    """The generator's objects for ``overlay`` (workers and, if asked for, ScaledObjects)."""
    values = load_values(overlay / "kit.yaml")
    return [obj for objects in render(values).values() for obj in objects]


def deployment_of(overlay: Path) -> Path:
    values = load_values(overlay / "kit.yaml")
    return (overlay / values.deployment_file).resolve()


def pod_specs(objects: list[dict[str, Any]] | tuple[dict[str, Any], ...]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (obj["metadata"]["name"], obj["spec"]["template"]["spec"])
        for obj in objects
        if obj["kind"] in {"Deployment", "StatefulSet"}
    ]


def validate_core(objects: list[dict[str, Any]] | tuple[dict[str, Any], ...]) -> int:
    """kubernetes-validate --strict on every object of Kubernetes' own API groups; how many."""
    checked = 0
    for obj in objects:
        if obj["apiVersion"].startswith(CRD_GROUPS):
            continue
        try:
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{obj['kind']} {obj['metadata']['name']}: {exc.message} at {list(exc.path)}")
        checked += 1
    return checked


# --- the generator's own output (no kubectl needed) ------------------------------------------------
@pytest.mark.parametrize("overlay", OVERLAYS, ids=lambda p: p.name)
def test_the_generated_files_match_their_deployment_file(overlay: Path) -> None:
    assert kit_files.stale(overlay) == [], "run `jobservice kit generate` on the overlay and commit"


@pytest.mark.parametrize("overlay", OVERLAYS, ids=lambda p: p.name)
def test_generated_workers_pass_the_kubernetes_schemas(overlay: Path) -> None:
    objects = generated(overlay)
    assert validate_core(objects) >= 3  # the deployment file's ConfigMap, the Service, a StatefulSet


@pytest.mark.parametrize("overlay", OVERLAYS, ids=lambda p: p.name)
def test_generated_workers_one_statefulset_per_card_group(overlay: Path) -> None:
    values = load_values(overlay / "kit.yaml")
    catalog = build_catalog(deployment_file=deployment_of(overlay))
    sets = [obj for obj in generated(overlay) if obj["kind"] == "StatefulSet"]
    assert len(sets) == len(catalog.groups)
    by_group = {s["metadata"]["annotations"]["jobservice.io/card-group"]: s for s in sets}
    assert set(by_group) == {g.devices for g in catalog.groups}, "each group exactly once"
    for group in catalog.groups:
        workload = by_group[group.devices]
        pod = workload["spec"]["template"]["spec"]
        (worker,) = pod["containers"]
        device = parse_devices(group.devices)
        resources = worker["resources"]
        if device.kind == "cpu":
            assert values.device_resource is None or values.device_resource not in resources["requests"]
        else:
            key = values.device_resource
            assert key and resources["limits"][key] == resources["requests"][key] == str(device.count)
            assert pod["runtimeClassName"] == values.runtime_class
        # Devices as the container sees them after the plugin's allocation, and the file's group.
        args = worker["args"]
        seen = parse_devices(args[args.index("--devices") + 1])
        assert (seen.kind, seen.count) == (device.kind, device.count)
        assert seen.indices == tuple(range(len(seen.indices)))  # numbered from 0 inside the container
        assert args[args.index("--group") + 1] == (group.name or group.devices)
        # The group's id is the pod's stable name (a StatefulSet's pods keep theirs).
        env = {e["name"]: e for e in worker["env"]}
        assert env["JOBSERVICE_WORKER_NODE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
        assert env["JOBSERVICE_POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
        settings = {name.upper() for name in Settings.model_fields}
        assert {n.removeprefix("JOBSERVICE_") for n in env if n.startswith("JOBSERVICE_")} <= settings
        # Its grace covers its longest job.
        longest = catalog.longest_timeout(group.models, default=DEFAULT_TIMEOUT)
        assert pod["terminationGracePeriodSeconds"] >= longest
        assert pod["terminationGracePeriodSeconds"] == stop_grace_seconds(
            catalog, group.models, job_timeout_seconds=DEFAULT_TIMEOUT
        )
        # /dev/shm sized, model paths mounted read-only, node selectors and tolerations as the values say.
        shm = next(v for v in pod["volumes"] if v["name"] == "shm")
        assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": values.shm_size}
        mounts = {m["mountPath"]: m for m in worker["volumeMounts"]}
        for model in group.models:
            spec = catalog.get(model)
            for _key, path in spec.required_paths if spec else ():
                under = [m for root, m in mounts.items() if Path(path).is_relative_to(root) and root != "/"]
                in_image = any(Path(path).is_relative_to(root) for root in values.image_paths)
                assert in_image or any(m.get("readOnly") for m in under), (model, path)
        assert pod.get("nodeSelector", {}) == values.node_selector
        assert pod.get("tolerations", []) == values.tolerations


def test_the_ascend_host_is_two_statefulsets_of_four_npus_with_flashtalks_grace() -> None:
    sets = {
        s["metadata"]["name"]: s
        for s in generated(KIT / "overlays" / "ascend-910b-8card")
        if s["kind"] == "StatefulSet"
    }
    assert sorted(sets) == ["jobservice-worker-npu-0-3", "jobservice-worker-npu-4-7"]
    pod = sets["jobservice-worker-npu-4-7"]["spec"]["template"]["spec"]
    assert pod["containers"][0]["resources"]["limits"]["huawei.com/Ascend910"] == "4"
    assert pod["containers"][0]["args"][-3:] == ["npu:0,1,2,3", "--group", "npu:4,5,6,7"]
    assert pod["terminationGracePeriodSeconds"] >= 1800  # FlashTalk's timeout


def test_a_model_path_under_no_volume_is_refused(tmp_path: Path) -> None:
    values = KitValues.model_validate(
        {
            "deployment_file": str(ROOT / "deploy" / "ascend-910b-8card.yaml"),
            "device_resource": "huawei.com/Ascend910",
            "model_volumes": [{"name": "models", "path": "/data/models"}],
        }
    )
    with pytest.raises(
        KitError, match=r"models\.soulx-flashhead-1\.3b\.repo = /opt/SoulX-FlashHead lies under no"
    ):
        render(values)
    values = values.model_copy(update={"device_resource": None})
    with pytest.raises(KitError, match="needs device_resource"):
        render(values)


def test_a_changed_deployment_file_is_caught_as_drift(tmp_path: Path) -> None:
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    deployment = tmp_path / "deploy.yaml"
    deployment.write_text(yaml.safe_dump({"workers": [{"devices": "cpu", "models": ["reference-t2v"]}]}))
    (overlay / "kit.yaml").write_text(yaml.safe_dump({"deployment_file": "../deploy.yaml"}))
    assert kit_files.write(overlay) == [overlay / "workers.yaml"]
    assert kit_files.stale(overlay) == []
    deployment.write_text(
        yaml.safe_dump({"workers": [{"devices": "cpu", "models": ["reference-t2v"], "name": "second"}]})
    )
    assert kit_files.stale(overlay) == [overlay / "workers.yaml"]


# --- hand-written parts, read as files -------------------------------------------------------------
def test_the_dashboard_component_is_the_dashboard_file() -> None:
    copy = KIT / "components" / "grafana-dashboard" / "jobservice.json"
    assert copy.read_text() == (ROOT / "deploy" / "grafana" / "jobservice.json").read_text()


def _config_literals() -> dict[str, str]:
    base = yaml.safe_load((KIT / "base" / "kustomization.yaml").read_text())
    (config,) = [g for g in base["configMapGenerator"] if g["name"] == "jobservice-config"]
    return dict(literal.split("=", 1) for literal in config["literals"])


def test_the_probes_pass_the_host_check_under_the_kits_settings() -> None:
    literals = _config_literals()
    settings = Settings.model_validate(
        {
            "auth": literals["JOBSERVICE_AUTH"],
            "allowed_hosts": json.loads(literals["JOBSERVICE_ALLOWED_HOSTS"]),
        }
    )
    api = [
        d for d in yaml.safe_load_all((KIT / "base" / "api.yaml").read_text()) if d["kind"] == "Deployment"
    ][0]
    container = api["spec"]["template"]["spec"]["containers"][0]
    probes = [container[k] for k in ("startupProbe", "readinessProbe", "livenessProbe")]
    for probe in probes:
        host = {h["name"]: h["value"] for h in probe["httpGet"]["httpHeaders"]}["Host"]
        # the kit's default, auth off, and an operator's list that keeps "localhost" as the docs say
        for variant in (settings, settings.model_copy(update={"auth": "off", "allowed_hosts": []})):
            assert host_allowed(host_name(host), allowed_hosts(variant)), (host, variant.auth)
        listed = settings.model_copy(update={"allowed_hosts": ["jobs.example.com", "localhost"]})
        assert host_allowed(host_name(host), allowed_hosts(listed))


def test_the_ingress_takes_the_largest_request_the_api_does() -> None:
    ingress = yaml.safe_load((KIT / "components" / "ingress" / "ingress.yaml").read_text())
    notes = ingress["metadata"]["annotations"]
    assert (
        notes["nginx.ingress.kubernetes.io/proxy-body-size"]
        == f"{Settings.model_fields['max_request_mb'].default}m"
    )
    assert notes["nginx.ingress.kubernetes.io/proxy-buffering"] == "off"  # live events
    assert int(notes["nginx.ingress.kubernetes.io/proxy-read-timeout"]) >= 600


# --- the custom resources: their CRDs' fields the kit uses, with their types -------------------------
# No schema of these CRDs ships offline; these models are the fields of prometheus-operator's
# monitoring.coreos.com/v1 (ServiceMonitor, PrometheusRule) and KEDA's keda.sh/v1alpha1 (ScaledObject)
# that the kit writes, typed as the CRDs type them, and nothing else (extra="forbid").
class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class Meta(_Strict):
    name: str
    namespace: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class SecretKeySelector(_Strict):
    name: str
    key: str


class SafeAuthorization(_Strict):
    type: Literal["Bearer"] = "Bearer"
    credentials: SecretKeySelector


class Endpoint(_Strict):
    port: str
    path: str
    interval: str
    scrapeTimeout: str
    authorization: SafeAuthorization


class LabelSelector(_Strict):
    matchLabels: dict[str, str]


class ServiceMonitorSpec(_Strict):
    selector: LabelSelector
    endpoints: list[Endpoint] = Field(min_length=1)


class ServiceMonitor(_Strict):
    apiVersion: Literal["monitoring.coreos.com/v1"]
    kind: Literal["ServiceMonitor"]
    metadata: Meta
    spec: ServiceMonitorSpec


class Rule(_Strict):
    alert: str
    expr: str
    for_: str = Field(alias="for")
    labels: dict[str, str]
    annotations: dict[str, str]


class RuleGroup(_Strict):
    name: str
    rules: list[Rule] = Field(min_length=1)


class PrometheusRule(_Strict):
    apiVersion: Literal["monitoring.coreos.com/v1"]
    kind: Literal["PrometheusRule"]
    metadata: Meta
    spec: dict[Literal["groups"], list[RuleGroup]]


class ScaleTarget(_Strict):
    apiVersion: Literal["apps/v1"]
    kind: Literal["StatefulSet"]
    name: str


class PrometheusTrigger(_Strict):
    type: Literal["prometheus"]
    metricType: Literal["AverageValue", "Value", "Utilization"]
    metadata: dict[Literal["serverAddress", "query", "threshold"], str]


class ScaledObjectSpec(_Strict):
    scaleTargetRef: ScaleTarget
    minReplicaCount: int = Field(ge=1)  # >= 1: a model's load takes minutes
    maxReplicaCount: int
    pollingInterval: int
    cooldownPeriod: int
    advanced: dict[str, Any]
    triggers: list[PrometheusTrigger] = Field(min_length=1)


class ScaledObject(_Strict):
    apiVersion: Literal["keda.sh/v1alpha1"]
    kind: Literal["ScaledObject"]
    metadata: Meta
    spec: ScaledObjectSpec


def _queried_metrics(expr: str) -> set[str]:
    metrics, others = names_in(expr)
    assert metrics, expr
    assert others <= PROMQL_WORDS | {"vector"}, (expr, others - PROMQL_WORDS)
    return metrics


def test_the_servicemonitor_scrapes_metrics_with_the_admin_key() -> None:
    monitor = ServiceMonitor.model_validate(
        yaml.safe_load((KIT / "components" / "servicemonitor" / "servicemonitor.yaml").read_text())
    )
    api = next(yaml.safe_load_all((KIT / "base" / "api.yaml").read_text()))
    assert monitor.spec.selector.matchLabels == api["spec"]["selector"]["matchLabels"]
    (endpoint,) = monitor.spec.endpoints
    assert (endpoint.port, endpoint.path) == ("http", "/metrics")
    assert endpoint.authorization.credentials == SecretKeySelector(name="jobservice-metrics-key", key="token")


def test_every_metric_a_rule_queries_is_exported() -> None:
    rule = PrometheusRule.model_validate(
        yaml.safe_load((KIT / "components" / "prometheusrule" / "prometheusrule.yaml").read_text())
    )
    exported = exported_series()
    queried: set[str] = set()
    for group in rule.spec["groups"]:
        for alert in group.rules:
            metrics = _queried_metrics(alert.expr)
            assert metrics <= exported, (alert.alert, metrics - exported)
            queried |= metrics
    for topic in (
        "jobservice_queue_oldest_age_seconds",  # oldest queued age per model
        "jobservice_group_state",  # groups down
        "jobservice_jobs_validated_total",  # gate-failure ratio
        "jobservice_metrics_database_up",  # database unreachable
        "jobservice_webhook_backlog_oldest_seconds",  # the webhook backlog
    ):
        assert topic in queried, topic


@pytest.mark.parametrize(
    "overlay", [o for o in OVERLAYS if load_values(o / "kit.yaml").autoscaling], ids=lambda p: p.name
)
def test_every_scaled_object_queries_exported_metrics_of_its_sets_models(overlay: Path) -> None:
    objects = generated(overlay)
    sets = {o["metadata"]["name"]: o for o in objects if o["kind"] == "StatefulSet"}
    scaled = [ScaledObject.model_validate(o) for o in objects if o["kind"] == "ScaledObject"]
    assert len(scaled) == len(sets)
    for obj in scaled:
        assert obj.spec.scaleTargetRef.name in sets
        (trigger,) = obj.spec.triggers
        query = trigger.metadata["query"]
        assert _queried_metrics(query) == {"jobservice_queue_output_seconds"}
        models = sets[obj.spec.scaleTargetRef.name]["metadata"]["annotations"]["jobservice.io/models"].split(
            ","
        )
        assert sorted(models) == sorted(m for m in models if f'model="{m}"' in query)
        assert float(trigger.metadata["threshold"]) > 0


def test_the_work_query_weighs_each_model_by_its_speed() -> None:
    plans = {
        o["metadata"]["name"]: o
        for o in generated(KIT / "overlays" / "ascend-910b-8card")
        if o["kind"] == "ScaledObject"
    }
    query = plans["jobservice-worker-npu-0-3"]["spec"]["triggers"][0]["metadata"]["query"]
    # Wan2.1 takes 35.6 s per second of video there, FlashTalk 1.0 (the deployment file's figures).
    assert '(max(jobservice_queue_output_seconds{model="wan2.1-t2v-1.3b"}) or vector(0)) * 35.6' in query
    assert '{model="soulx-flashtalk-14b"}) or vector(0)) * 1' in query
    assert callable(work_query)


# --- rendered by kubectl kustomize ---------------------------------------------------------------
@needs_kubectl
@pytest.mark.parametrize("overlay", OVERLAYS, ids=lambda p: p.name)
def test_every_overlay_renders_and_passes_the_kubernetes_schemas(overlay: Path) -> None:
    objects = rendered(overlay)
    kinds = {o["kind"] for o in objects}
    assert {"Deployment", "StatefulSet", "Service", "PodDisruptionBudget", "ConfigMap"} <= kinds
    assert validate_core(objects) >= 8
    for obj in objects:
        if obj["kind"] == "ServiceMonitor":
            ServiceMonitor.model_validate(obj)
        elif obj["kind"] == "PrometheusRule":
            PrometheusRule.model_validate(obj)
    for name, pod in pod_specs(objects):  # the scheduler knows what each container needs
        for container in [*pod.get("initContainers", []), *pod["containers"]]:
            requests = container["resources"]["requests"]
            assert {"cpu", "memory"} <= set(requests), (name, container["name"])
    beat = next(
        o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "jobservice-beat"
    )
    assert beat["spec"]["replicas"] == 1 and beat["spec"]["strategy"] == {"type": "Recreate"}


@needs_kubectl
@pytest.mark.parametrize("overlay", OVERLAYS, ids=lambda p: p.name)
def test_every_pod_migrates_first_and_sets_only_real_settings(
    overlay: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    objects = rendered(overlay)
    configmaps = {o["metadata"]["name"]: o.get("data", {}) for o in objects if o["kind"] == "ConfigMap"}
    fields = {name.upper() for name in Settings.model_fields}
    secret_files: set[str] = set()
    for name, pod in pod_specs(objects):
        (main,) = pod["containers"]
        if not str(main.get("image", "")).startswith("jobservice-"):
            continue  # the evaluation component's PostgreSQL, Redis, MinIO
        init = pod.get("initContainers", [])
        assert [c["name"] for c in init] == ["migrate"] and init[0]["args"] == [
            "jobservice",
            "db",
            "upgrade",
        ], name
        variables: dict[str, str] = {}
        for container in [*init, main]:
            for source in container.get("envFrom", []):
                ref = source["configMapRef"]["name"]
                assert ref in configmaps, (name, ref)  # a ConfigMap of the render, hash suffix and all
                variables.update(configmaps[ref])
            variables.update({e["name"]: e.get("value", "") for e in container.get("env", [])})
        for variable, value in variables.items():
            if not variable.startswith("JOBSERVICE_"):
                continue
            setting = variable.removeprefix("JOBSERVICE_")
            if setting not in fields:  # else the setting's value read from a file (a mounted secret)
                assert setting.endswith("_FILE") and setting.removesuffix("_FILE") in fields, (
                    f"{name}: {variable} is no setting"
                )
                secret_files.add(value)
        # The settings load as the pod's process loads them (its secret files stood in for).
        with monkeypatch.context() as patched:
            for variable in [v for v in os.environ if v.startswith("JOBSERVICE_")]:
                patched.delenv(variable)
            for variable, value in variables.items():
                if variable.endswith("_FILE") and variable.removeprefix("JOBSERVICE_") not in fields:
                    (tmp_path / Path(value).name).write_text("stand-in\n")
                    value = str(tmp_path / Path(value).name)
                if value:  # (the downward API's, the pod's name, has none here)
                    patched.setenv(variable, value)
            loaded = Settings(_env_file=None)  # type: ignore[call-arg]
            assert loaded.auth == "keys" and loaded.storage_backend == "s3", name
        # The deployment file the pod is told to read is in the ConfigMap it mounts.
        path = Path(variables["JOBSERVICE_DEPLOYMENT_FILE"])
        mounted = {m["mountPath"]: m["name"] for m in main["volumeMounts"]}
        volume = next(v for v in pod["volumes"] if v["name"] == mounted[str(path.parent)])
        assert path.name in configmaps[volume["configMap"]["name"]], name
        # Writable folders are emptyDirs; the root file system is read-only.
        assert main["securityContext"]["readOnlyRootFilesystem"] is True
        assert pod["securityContext"]["runAsNonRoot"] is True
        writable = {m["mountPath"] for m in main["volumeMounts"] if not m.get("readOnly")}
        empty = {v["name"] for v in pod["volumes"] if "emptyDir" in v}
        assert {mounted[p] for p in writable} <= empty, name
    # Every secret file a pod reads is a key of the Secret it mounts.
    assert {Path(f).name for f in secret_files} == {
        "database-url",
        "broker-url",
        "secret-key",
        "s3-access-key-id",
        "s3-secret-access-key",
    }


def test_the_evaluation_secret_has_every_key_the_pods_read() -> None:
    component = yaml.safe_load((KIT / "components" / "evaluation" / "kustomization.yaml").read_text())
    secret = next(g for g in component["secretGenerator"] if g["name"] == "jobservice-secrets")
    keys = {literal.split("=", 1)[0] for literal in secret["literals"]}
    files = {
        Path(v).name for k, v in _config_literals().items() if k.endswith("_FILE") and "DEPLOYMENT" not in k
    }
    assert keys == files


@needs_kubectl
def test_the_dashboard_configmap_is_the_dashboard_file() -> None:
    objects = rendered(KIT / "overlays" / "cuda-2gpu")
    (board,) = [
        o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "jobservice-dashboard"
    ]
    assert board["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(board["data"]["jobservice.json"]) == json.loads(
        (ROOT / "deploy" / "grafana" / "jobservice.json").read_text()
    )
    assert board["data"]["jobservice.json"] == (ROOT / "deploy" / "grafana" / "jobservice.json").read_text()


@needs_kubectl
@pytest.mark.parametrize(
    "overlay", [o for o in OVERLAYS if (o / "autoscaling").exists()], ids=lambda p: p.name
)
def test_every_scale_target_names_a_rendered_workload_even_with_a_name_prefix(
    overlay: Path, tmp_path: Path
) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "namePrefix": "team-a-",
                # kustomize takes relative paths only
                "resources": [os.path.relpath(overlay, site)],
                "components": [os.path.relpath(overlay / "autoscaling", site)],
            }
        )
    )
    objects = kustomize(site)
    sets = {o["metadata"]["name"] for o in objects if o["kind"] == "StatefulSet"}
    scaled = [ScaledObject.model_validate(o) for o in objects if o["kind"] == "ScaledObject"]
    assert scaled and all(name.startswith("team-a-") for name in sets)
    assert {s.spec.scaleTargetRef.name for s in scaled} == {
        s for s in sets if s.startswith("team-a-jobservice-worker-")
    }
    services = {o["metadata"]["name"] for o in objects if o["kind"] == "Service"}
    statefulsets = [o for o in objects if o["kind"] == "StatefulSet" and "worker" in o["metadata"]["name"]]
    assert all(s["spec"]["serviceName"] in services for s in statefulsets)
