"""Stacks of a test's own (private, production-shaped) and the faults put into them."""
