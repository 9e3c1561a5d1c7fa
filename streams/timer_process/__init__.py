"""A worker's timer process: the isolated timers and the outbox relay, in a child process.

A worker is two OS processes. The Faust process runs the agents, tables, web views and the
timers that are not latency-bound. It starts, at startup, a child (``python -m
streams.timer_process``) that runs the schedules declared ``isolated=True`` (calendar
dispatch) and the outbox relay, each on its own event loop and core, so that a burst of input
batches cannot hold up a reminder that is due (docs/benchmarks.md, "Where the lateness goes").

- supervisor.py (parent): starts the child, restarts it with backoff when it exits, forwards
  wake-ups of isolated schedules, and asks it for its timers and metrics, which the parent's
  /metrics, /timers and /status merge with its own. Stopping the worker stops the child.
- child.py: builds the same app context, runs only the isolated schedules and the relay,
  answers the parent over its stdin/stdout, and stops when the parent goes away (EOF).
- wire.py: the line-delimited JSON both sides speak.
- progress.py: each loop of the child (a schedule, the relay) promises its next turn; the
  beat carries what is left of every promise, so the parent sees a stuck loop, not only a
  stopped process.

``WORKER_TIMER_PROCESS=false`` keeps everything in one process (as before).
"""
