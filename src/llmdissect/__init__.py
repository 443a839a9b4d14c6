"""llm-dissect: measure, dissect and predict the runtime performance of LLMs."""

__version__ = "0.1.0"


def load_results(*args, **kwargs):
    """Records of a results store as a pandas DataFrame; see `results.frame.load_results`."""
    from llmdissect.results.frame import load_results as _load

    return _load(*args, **kwargs)


__all__ = ["__version__", "load_results"]
