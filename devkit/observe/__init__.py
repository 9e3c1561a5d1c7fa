"""Reading a worker's /metrics and what the operators' rules and dashboards ask of it."""
