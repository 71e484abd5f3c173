"""The ``jobservice`` command: the embedded stack, the API and worker launchers, a client, batches.

A surface: it may import every domain package, and nothing in the domain imports it.
"""
