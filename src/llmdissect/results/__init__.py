"""Run records and the embedded SQLite store that keeps them."""
from llmdissect.results.schema import KINDS, SOURCES, STATUSES, RunRecord
from llmdissect.results.store import ResultStore, open_store

__all__ = ["RunRecord", "KINDS", "SOURCES", "STATUSES", "ResultStore", "open_store"]
