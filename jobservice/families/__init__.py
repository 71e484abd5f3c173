"""Model families on the API side: one module per family, each registering itself.

A family module (``flashhead``, ``flashtalk``, ``omnirt``, ``vllm_omni``, ``diffusers``) holds
everything the API knows of that back end: its deployment entry schema, its parameter model with
the seed documents' defaults, its output-gate policy, its maturity, and the ``module:Class`` of
its worker adapter. ``reference`` holds the built-in reference models. ``deployment`` reads a
deployment file against the registered families and builds the catalog.

Adding a family: one module here that calls ``register(Family(...))`` (it is imported by this
package on start) and one adapter package under ``workers/adapters/``;
``tests/unit/test_families.py`` proves the two sides agree.

Domain: imports ``jobservice.catalog``, ``jobservice.fleet`` and ``jobservice.settings``; never the
HTTP, web or CLI surfaces, never ``workers``.
"""

from __future__ import annotations

import importlib
import pkgutil

from jobservice.families.family import FAMILIES, Family, register

__all__ = ["FAMILIES", "Family", "register"]

_SHARED = {"family", "entry", "params", "deployment", "reference"}
for _module in pkgutil.iter_modules(__path__):
    if _module.name not in _SHARED:
        importlib.import_module(f"{__name__}.{_module.name}")
