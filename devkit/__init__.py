"""The one home of the helpers shared by the tests, the benchmarks and the stack scripts (never
imported by the service, never importing tests/ or bench/).

Top-level modules are the plumbing every tier uses: ``wait`` (``eventually``: poll a
condition with a deadline that fails), ``workers`` (worker processes started as a user
starts them), ``database`` (admin connection, throwaway and template databases, one-off
reads), ``kafka``, ``seed`` (bulk rows), ``helm``. Sub-packages by purpose:

- ``messages``: wire-format messages as other teams' producers send them, and fuzz strategies;
- ``harness``: a slice's real appliers and runners in-process on a test database (calendar
  dispatch, the outbox relay), and the timer registry on virtual time;
- ``loads``: the fault matrix's loads, the effects they must lead to, and their auditor;
  its knobs, timeline and faults, document-expiry days and end-of-run checks;
- ``stacks``: private and production-shaped stacks and the faults put into them (a proxy
  that comes up late, a frozen worker, a pair of workers one of which is frozen);
- ``observe``: reading a worker's /metrics and what the operators' files ask of it;
- ``procs``: scripts run as child processes (``python -m devkit.procs.<name>``).

Only tests and pytest fixtures live under tests/ (the conftest.py files); a test file never
imports another test file.
"""
