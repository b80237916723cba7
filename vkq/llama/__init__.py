"""A llama-architecture decoder on vkq (`vkq generate`), and Qwen's, Gemma's, Phi-3's and gpt-oss's, by job:

- architectures: the architectures it runs (llama, qwen2, qwen3, qwen3moe, gemma2, gemma3, phi3,
  gpt-oss), one row each;
- config: what a llama GGUF must hold, its hyper-parameters (refusals here);
- model: the parsed, checked file, shared by every engine;
- matvecs: the weight mat-vecs of the host engine, grouped into stacked calls;
- vector_ops: the decode step's vector ops as compute shaders, a module each;
- host: the host-driven decoder (engine "host", and the float64 numpy reference);
- gpu_step: the whole decode step on the device (engine "graph");
- profile: where the graph engine's step spends its GPU time;
- sampling: llama.cpp's sampler chain, its settings and its numpy sampler;
- sample_op: the device's sampler, the op after the output head;
- chat_template: a conversation rendered by a model's chat template (Jinja2's sandbox);
- decoding: the token loop (greedy or sampled, why it stopped, chat, scoring) and its statistics.
"""
