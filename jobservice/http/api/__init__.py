"""The JSON API, by surface: ``native`` (``/jobs``, ``/batches``, ``/fleet``, ``/models``, health,
streams), ``openai`` (``/v1/videos``) and ``policy`` (what every request passes); beside them what
they share: ``/openapi.json`` built from their route tables (``doc``, ``openapi``), safe body
reading (``bodies``) and the one error handler (``errors``).

A surface: views are parse → service → serialize over the domain packages; nothing in the
domain imports it.
"""
