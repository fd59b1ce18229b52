"""Side effects on the database: SQLAlchemy 2 on SQLite (default) or PostgreSQL."""
