"""The tuning journal: SQLite store, one-variable rule, handbook."""
