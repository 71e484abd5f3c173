"""OmniRT, through ``python -m omnirt generate --config`` or ``omnirt serve``: the adapter and
the request it sends (request.py).

Imports the adapter contract, processes/ and ``jobservice.families.omnirt`` (its API side).
"""
