"""The fleet: card groups and pinning (placement) and the workers' presence rows.

Domain: imports catalog and db; never the surfaces.
"""
