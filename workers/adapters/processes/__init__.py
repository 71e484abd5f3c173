"""Shared helpers of adapters that drive other processes and servers: children, residents,
HTTP clients, instance pools, device memory.

Imports only the adapter contract and ``jobservice.fleet``; the family adapters import it.
"""
