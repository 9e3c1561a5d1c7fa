#!/usr/bin/env bash
# `make demo`: run a worker on the local stack, send the demo workload, show the outcome.
# The worker keeps running afterwards (Ctrl-C stops it); DEMO_EXIT=1 stops right after.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="$ROOT/.venv/bin/python"
PORT="${WEB_PORT:-6066}"
LOG="$ROOT/.dev/demo-worker.log"
mkdir -p "$ROOT/.dev"

echo "demo: starting worker (log: $LOG, web: http://127.0.0.1:$PORT)"
"$PY" -m streams worker >"$LOG" 2>&1 &
pid=$!
stop() { kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true; echo "demo: worker stopped"; }
trap stop EXIT INT TERM

for ((i = 0; i < 180; i++)); do
  if curl -fs "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then break; fi
  kill -0 "$pid" 2>/dev/null || { tail -n 40 "$LOG"; echo "demo: worker exited" >&2; exit 1; }
  sleep 0.5
done
curl -fs "http://127.0.0.1:$PORT/health" >/dev/null || { tail -n 40 "$LOG"; echo "demo: worker not ready after 90s" >&2; exit 1; }
echo "demo: worker ready"

status=0
"$PY" -m streams demo || status=$?
if [ "${DEMO_EXIT:-0}" = 1 ]; then exit "$status"; fi
echo "demo: the worker keeps running — try: curl http://127.0.0.1:$PORT/status ; Ctrl-C to stop"
wait "$pid"
