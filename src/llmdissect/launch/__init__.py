"""Where a workload runs: inline, in a child process, or under torchrun (many processes)."""
from llmdissect.launch.child import ChildResult, run_child, run_inline

__all__ = ["ChildResult", "run_child", "run_inline"]
