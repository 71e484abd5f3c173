"""The database: engine and sessions, the tables, and Alembic (migrations/ ships in the wheel).

Imports nothing of the project but ``jobservice.settings``; everything may import it.
"""
