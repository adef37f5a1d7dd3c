"""The ifgym version, written once: a root module, so the run record reads it without importing the root package."""

__version__ = "0.1.0"
