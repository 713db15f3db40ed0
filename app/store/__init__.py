"""The store: engines, sessions and the one commit site (db), and the schema as SQLAlchemy tables (models)."""
