"""The analytical performance model: memory, FLOPs and time without running anything.

Many small pure functions, one quantity each, with their derivation and source in the
docstring. Nothing here imports torch (a test checks `sys.modules`), so that an estimate
runs anywhere in milliseconds. `estimate.py` composes them; `advise.py` evaluates the same
formulas on numpy arrays of configurations.
"""
