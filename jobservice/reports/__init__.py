"""The RunReport schema and what a run was built from (buildinfo).

A leaf of the domain: imports nothing of the project; the API, batches and workers read it.
"""
