"""Fixtures of the unit-directory tests: ``hostile`` (an app with auth off, for the hostile corpus)."""

from tests.unit.hostile import hostile

__all__ = ["hostile"]
