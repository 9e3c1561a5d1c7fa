"""Automation scheduler rules (seed 003), pure: no I/O, no clock, no randomness.

- rules.py: candidates, the Ensure decision table, the backoff ladder, the interruption plan;
- keys.py: SchedulerKey formats and InputHash;
- triggers.py, reports.py, recurring.py, immediate.py: the trigger providers' candidates;
- revalidation.py: what a claimed row's handler checks before it is sent;
- delivery.py: execution-time recipients and delivery (resolved when a row is due).
"""
