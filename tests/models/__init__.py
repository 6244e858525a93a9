"""The shared pydantic models and their fast construction."""
