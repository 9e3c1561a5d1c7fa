"""Pure domain rules: plain data in, plain data out, no I/O."""
