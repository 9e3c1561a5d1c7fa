"""Faust agents, one per input topic: decode the contract → domain rule → repository."""
