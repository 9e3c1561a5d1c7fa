"""Scripts a test runs as a child process, from the repository root: ``python -m devkit.procs.<name>``."""
