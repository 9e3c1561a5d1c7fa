"""Dead letters: sending them with the reason in headers (send.py), redacting secret
fields (redact.py), and replaying them to their source topic (replay.py, cli.py)."""
