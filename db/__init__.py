"""PostgreSQL boundary: migrations, named SQL statements and the repositories that run them."""
