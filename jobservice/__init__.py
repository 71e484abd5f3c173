"""jobservice: a queue-backed batch video job service."""

__version__ = "0.1.0"
