"""Stand-in for the ``omnirt`` package: only ``python -m omnirt generate ... --json``."""
