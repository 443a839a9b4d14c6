"""Install torch before anything that depends on it.

A plain ``torch`` requirement pulls a CUDA build of several GB. Where the environment
already has a torch (a CUDA build on a GPU node, say) it is kept; otherwise the pinned
release is installed, which on a CPU-only machine with a local wheel is the CPU build.
"""
import importlib.util
import subprocess
import sys

PINNED = "torch==2.13.0"


def main() -> int:
    if importlib.util.find_spec("torch") is not None:
        import torch

        print(f"keeping installed torch {torch.__version__} (cuda: {torch.version.cuda})")
        return 0
    print(f"installing {PINNED}")
    return subprocess.call([sys.executable, "-m", "pip", "install", "-q", PINNED])


if __name__ == "__main__":
    sys.exit(main())
