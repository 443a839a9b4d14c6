"""Suites: sets of benchmark points run together (the built-in `quick` suite lives here)."""
