"""Job groups: many jobs from one manifest (``POST /job-groups``), followed and collected together.

A manifest is a CSV or JSON Lines table, one job per row (``manifest``); every row is checked
exactly as ``POST /jobs`` checks one job, each problem named by row and column, before anything is
stored (``plan``; file inputs are references, ``inputs``); then all the jobs are created in one
transaction, admitted against the tenant's quotas as a whole and queued at batch priority
(``service``). A group is followed by its progress (counts by status, ``presenters`` and
``views``), its live stream, and collected as a CSV of results and a zip of its videos, both
streamed (``results``); canceling it cancels every unfinished job.

Not a nightly batch (``jobservice.nightly``): a group has no spec, baseline or comparison; it is a
way to submit and follow many ordinary jobs at once. Its jobs are ordinary jobs (``group_id``,
``group_row``) that the fleet's policy schedules like any other batch-priority work.
"""
