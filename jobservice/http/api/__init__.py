"""The JSON API: ``/jobs``, ``/batches``, ``/models``, health, ``/openapi.json``, and the one error handler.

A surface: views are parse → service → serialize over the domain packages; nothing in the
domain imports it.
"""
