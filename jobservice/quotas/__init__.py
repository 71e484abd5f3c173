"""Quotas and budgets: how much a tenant may queue, how fast a key may call, and the disk floor.

``limits`` resolves a caller's limits (key override > tenant row > settings default); ``admit``
refuses a submission over a quota inside the transaction that would insert its rows; ``rate``
is the per-key request rate limit shared by every API process through Redis; ``disk`` refuses
submissions when the spool or the local object store runs short of free space. A domain package:
it never imports the HTTP layer or the CLI.
"""
