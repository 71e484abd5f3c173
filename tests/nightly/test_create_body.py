"""``POST /batches`` reads its JSON body through the BatchCreate request model, with the same refusals."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({}, "Give exactly one of 'spec', 'spec_yaml' or 'spec_path'."),
        ({"spec_yaml": 5, "spec_path": "x.yaml"}, "Give exactly one of 'spec', 'spec_yaml' or 'spec_path'."),
        ({"spec": [1, 2]}, "A batch spec must be a mapping with 'name' and 'cases'."),
        ({"spec_yaml": 5}, "'spec_yaml' must be a string of YAML."),
        ({"spec_path": ["a"]}, "'spec_path' must be a path under the batch root."),
    ],
)
def test_a_body_that_does_not_give_one_spec_is_refused(
    bclient: Any, body: dict[str, Any], message: str
) -> None:
    response = bclient.post("/batches", json=body)
    assert response.status_code == 422
    assert response.get_json()["error"] == {"code": "invalid_spec", "message": message}
