"""A slice's real appliers and runners in-process on a test database, and readers of its rows."""
