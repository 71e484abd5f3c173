"""Device groups: parsing --devices, pinning variables, which models fit."""

from __future__ import annotations

import pytest

from jobservice.families.deployment import default_catalog
from jobservice.fleet.placement import DeviceSpecError, parse_devices, pinning_env, servable_models


@pytest.mark.parametrize(
    ("spec", "kind", "indices", "torch_device", "label"),
    [
        ("cpu", "cpu", (), "cpu", "cpu"),
        ("cuda:0", "cuda", (0,), "cuda:0", "cuda:0"),
        ("gpu:1", "cuda", (1,), "cuda:0", "cuda:1"),
        ("cuda:0,1", "cuda", (0, 1), "cuda:0", "cuda:0,1"),
        ("npu:2,3", "npu", (2, 3), "npu:0", "npu:2,3"),
        ("NPU:4-7", "npu", (4, 5, 6, 7), "npu:0", "npu:4,5,6,7"),
    ],
)
def test_parse_devices(spec: str, kind: str, indices: tuple[int, ...], torch_device: str, label: str) -> None:
    device = parse_devices(spec)
    assert (device.kind, device.indices, device.torch_device, device.label) == (
        kind,
        indices,
        torch_device,
        label,
    )
    assert device.count == max(1, len(indices))


@pytest.mark.parametrize(
    "spec", ["", "tpu:0", "cuda", "cuda:", "cpu:0", "npu:3-1", "cuda:0,0", "cuda:a", "cuda:,"]
)
def test_bad_device_specs(spec: str) -> None:
    with pytest.raises(DeviceSpecError):
        parse_devices(spec)


def test_pinning_env() -> None:
    assert pinning_env(parse_devices("npu:2,3")) == {
        "ASCEND_RT_VISIBLE_DEVICES": "2,3",
        "CUDA_VISIBLE_DEVICES": "",
    }
    assert pinning_env(parse_devices("cuda:1")) == {
        "CUDA_VISIBLE_DEVICES": "1",
        "ASCEND_RT_VISIBLE_DEVICES": "",
    }
    assert pinning_env(parse_devices("cpu")) == {"CUDA_VISIBLE_DEVICES": "", "ASCEND_RT_VISIBLE_DEVICES": ""}


def test_reference_models_fit_any_single_device() -> None:
    catalog = default_catalog()
    for spec in ("cpu", "cuda:0", "npu:2,3"):
        assert all(reason is None for reason in servable_models(catalog, parse_devices(spec)).values())
    only = servable_models(catalog, parse_devices("cpu"), ["reference-t2v"])
    assert list(only) == ["reference-t2v"]
