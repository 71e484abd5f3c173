"""OmniRT, through ``python -m omnirt generate --config`` or ``omnirt serve``."""
