"""The native API: ``/jobs``, ``/batches``, ``/fleet``, ``/usage``, ``/quota``, ``/models``, health,
``/metrics``, the live event streams, and the fast path that answers ``GET /jobs/<id>`` beneath Flask."""
