# Two entry points, both self-installing on a fresh machine:
#   make serve  - the streaming server on http://127.0.0.1:8000: the 0.6B CustomVoice checkpoint on a
#                 CUDA GPU with the Hugging Face hub in reach, else the built-in tiny checkpoint
#   make test   - lint + the whole test suite (oracle venv included)
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
TORCH := torch==2.13.0

.PHONY: setup serve demo test lint clean

# The server alone (make serve); the test tools on top of it (make test).
$(VENV)/.installed: pyproject.toml scripts/setup.sh
	bash scripts/setup.sh $(PYTHON) $(VENV) $(TORCH) runtime
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed
	bash scripts/setup.sh $(PYTHON) $(VENV) $(TORCH) dev
	touch $@

setup: $(VENV)/.installed

TEST_TOOLS := tests/web/node_modules/.installed
$(TEST_TOOLS): tests/web/package-lock.json scripts/setup_test_tools.sh
	bash scripts/setup_test_tools.sh
	touch $@

serve: setup
	$(VENV)/bin/voicewire serve --config auto

demo: setup
	$(VENV)/bin/voicewire synth --model tiny --speaker vivian --text "Hello from voicewire." --max-frames 60 --out demo.wav
	@echo "wrote demo.wav (tiny random checkpoint: it exercises the pipeline, it does not speak words)"

lint: $(VENV)/.installed-dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	bash scripts/typecheck.sh $(VENV)

test: $(VENV)/.installed-dev $(TEST_TOOLS) lint
	$(PY) -m pytest -q --durations=30

clean:
	rm -rf $(VENV) demo.wav
