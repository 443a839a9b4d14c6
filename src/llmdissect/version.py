"""The package version, at the bottom so that every layer may read it."""

__version__ = "0.1.0"
