"""The measurement core: one timer, one loop policy, one Stats type, memory and environment."""
from llmdissect.measure.stats import Stats
from llmdissect.measure.timer import LoopPolicy, LoopResult, Timer, measure_loop

__all__ = ["Stats", "Timer", "LoopPolicy", "LoopResult", "measure_loop"]
