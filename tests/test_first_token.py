"""What the first token waits for on the graph engine: warm_up records the
steps a prompt needs without running them (its time does not grow with the
prompt's compute), a step's outputs take one tensor per role however many
layers it has, and a generation that records steps on first use names that
time apart from its prompt's."""
from __future__ import annotations

from vkq.llama.gpu_step import GpuLlama

TEXT = "the theory that the three then- the other thing that the world the theory of the"


def test_warm_up_records_without_running(backend, tiny):
    model = GpuLlama(tiny, backend, "auto", ctx=64, prompt_kernels="matmul", prompt_chunk=8)
    ids = model.tokenizer.encode(TEXT)
    assert len(ids) % 8, "the prompt has a rest chunk"
    model.warm_up(len(ids))
    assert model.submits == 0, "warm_up ran a step"
    assert {("prompt", 8), ("prompt", len(ids) % 8)} <= set(model._steps)
    assert all(step.graph._seq is not None for step in model._steps.values()), "a step left unrecorded"
    gen = model.greedy(ids, 3, stop_at_eos=False)
    assert gen.stats.record_seconds == 0.0
    assert "first use" not in gen.stats.summary()
    # the same tokens as a decoder that records on first use, which says so
    fresh = GpuLlama(tiny, backend, "auto", ctx=64, prompt_kernels="matmul", prompt_chunk=8)
    again = fresh.greedy(ids, 3, stop_at_eos=False)
    assert again.tokens == gen.tokens
    assert again.stats.record_seconds > 0.0
    assert "steps recorded in" in again.stats.summary() and "one-time" in again.stats.summary()
    assert fresh.greedy(ids, 3, stop_at_eos=False).stats.record_seconds == 0.0


def test_step_outputs_shared_across_layers(backend, tiny):
    model = GpuLlama(tiny, backend, "auto", ctx=64, prompt_kernels="matmul", prompt_chunk=8)
    assert model.config.n_layer > 1
    graph = model._step("prompt", 8).graph
    roles = {"+".join(nm.split(".")[-2] for nm in gr.names) for gr in model.file.groups
             if gr.names != model.file.output_group}  # (the output head writes the logits)
    outputs = [t for t in graph._tensors.values() if t.name in roles]
    # one tensor per role, not one per layer
    assert sorted(t.name for t in outputs) == sorted(roles)
