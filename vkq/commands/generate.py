"""`vkq generate`: text generation of a llama GGUF model on vkq (greedy,
or sampled; one chat turn with --chat).

The model is loaded by vkq.llama.loading.load_model (`vkq.load_model` from
Python), with the same defaults; the context grows to what the prompt and
the new tokens need where that is more than its default.
"""
from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path

from ..backend import Backend
from ..blocks.activations import GENERATE_ACTIVATIONS
from ..llama.config import STEPS_PER_SUBMIT_MAX
from ..llama.decoding import counted, submits_per_token
from ..llama.draft import DraftModel, check_same_vocabulary
from ..llama.lookup import P_MIN
from ..llama.host import LlamaModel
from ..llama.loading import load_model
from ..llama.model import LlamaFile
from ..llama.profile import shape_table
from ..llama.sampling import Sampling
from ..llama.vector_ops import GPU_LAUNCH_CAPS


def _prompt_ids(file: LlamaFile, prompt: str) -> list[int]:
    """The prompt's token ids, refused when there are none (an empty prompt
    to a model that adds no BOS token): said so before anything is uploaded,
    not found later as a context of 0 positions."""
    ids = file.tokenizer.encode(prompt)
    if not ids:
        raise ValueError("the prompt is empty: no token to start from (this model adds no BOS token); give -p text")
    return ids


def _prompt_kernels_text(decoder) -> str:
    """How the graph engine takes a prompt, for the load line ("" for the host engine)."""
    kernels = getattr(decoder, "prompt_kernels", None)
    if kernels is None:
        return ""
    what = "mat-mat" if kernels == "matmul" else "mat-vec"
    ran = getattr(decoder, "prompt_kernel_names", None)  # (what the graph engine's recorded prompt steps run)
    return (f"; prompt in chunks of up to {decoder.prompt_chunk} tokens through the {what} kernels"
            + (f" ({ran})" if ran else ""))


def generate(model: str | Path, prompt: str, n_tokens: int = 32, *, engine: str = "graph", path: str = "auto",
             activations: str = GENERATE_ACTIVATIONS, ctx: int | None = None, ignore_eos: bool = False,
             fuse: bool = True, device: int | None = None, timestamps: bool = False, profile: bool = False,
             spread: bool = True, fold: bool = True, shape: str | None = None, speculative: str | None = None,
             ubatch: int | None = None, prompt_kernels: str | None = None, draft: str | Path | None = None,
             draft_max: int | None = None, draft_p_min: float | None = None, steps_per_submit: int = 1,
             sampling: Sampling | None = None, stop=(), chat: bool = False, chat_template: str | None = None,
             system: str | None = None) -> int:
    """The command: prints the prompt and its continuation (stdout), the load
    time and the statistics (stderr). ctx: the context the KV cache holds
    (default: LlamaConfig.default_context, grown to what the prompt
    and the new tokens need). timestamps: the graph engine
    reports its kernels' share of the step; profile: and a table of where a
    decode step's GPU time goes (vkq.llama.profile), after the statistics.
    shape: a table of the decode step's launches and serial depths
    (vkq.llama.profile.step_shape), as this device takes them ("device")
    or as a GPU class does (a key of vector_ops.GPU_LAUNCH_CAPS: the step
    then runs with that class's vector-op launches here too; its mat-vecs
    shown as that class's table chooses them, vkq.llama.profile.MatvecView,
    while this device runs its own). speculative: "lookup",
    speculative greedy decoding (Decoder.greedy's: the same text), its
    drafted and accepted tokens and tokens per step beside t/s; draft: a
    GGUF file of the model's vocabulary drafts instead, on the same engine
    (vkq.llama.draft.DraftModel; draft_p_min its p_min, default
    vkq.llama.lookup.P_MIN); draft_max: the most drafted tokens a step
    verifies (default Decoder.draft_limit's). ubatch: the
    graph engine's prompt tokens per submit; prompt_kernels: the kernels of
    its prompt chunks, "matmul" or "matvec" (default: the device's).
    steps_per_submit: the graph engine chains up to that many greedy
    decode steps in one submit (Decoder.greedy's: the same text). spread,
    fold: the graph engine's (vkq.llama.gpu_step.GpuLlama). sampling: a
    vkq.llama.sampling.Sampling (None: greedy); stop: strings that end the
    generation. chat: the prompt is a user's message, rendered with the
    model's chat template (chat_template: another, a built-in name or a
    Jinja file; system: a system message first), and the reply is printed."""
    if shape is not None and shape != "device" and shape not in GPU_LAUNCH_CAPS:
        raise ValueError(f"--shape {shape}: device, or a GPU class: {', '.join(sorted(GPU_LAUNCH_CAPS))}")
    if shape is not None and (engine == "host" or path == "numpy"):
        raise ValueError("--shape counts the launches of the graph engine's step: it needs --engine graph and a "
                         "device path")
    if speculative is not None and draft is not None:
        raise ValueError("--speculative lookup and --draft are two ways to draft tokens: give one of them")
    if draft_max is not None and speculative is None and draft is None:
        raise ValueError("--draft-max sets how many drafted tokens a step verifies: it needs --draft or "
                         "--speculative")
    if draft_p_min is not None and draft is None:
        raise ValueError("--draft-p-min sets when the draft model stops drafting: it needs --draft")
    if steps_per_submit != 1:
        if speculative is not None or draft is not None:
            raise ValueError("--steps-per-submit chains plain greedy's steps; speculative decoding (--speculative, "
                             "--draft) verifies drafts in steps of several tokens: give one of them")
        if engine == "host" or path == "numpy":
            raise ValueError("--steps-per-submit chains the graph engine's decode steps; the host engine runs one "
                             "step per token: it needs --engine graph and a device path")
        if not 1 <= steps_per_submit <= STEPS_PER_SUBMIT_MAX:
            raise ValueError(f"--steps-per-submit {steps_per_submit}: 1 to {STEPS_PER_SUBMIT_MAX} decode steps "
                             "per submit")
    if (speculative is not None or draft is not None) and profile:
        raise ValueError("--profile times the one-token decode step; speculative decoding (--speculative, --draft) "
                         "decodes in steps of several: give one of them")
    if n_tokens < 0:
        raise ValueError(f"-n must be >= 0, got {n_tokens}")
    samples = sampling is not None and not sampling.greedy
    if samples and profile:
        raise ValueError("--profile times greedy's decode step: not with sampling (--temp above 0, --repeat-penalty)")
    if not chat and (chat_template is not None or system is not None):
        raise ValueError("--chat-template and -sys/--system render the prompt as a chat turn: they need --chat")
    launches = None if shape in (None, "device") else shape
    t0 = time.perf_counter()
    file = LlamaFile(model, fuse)
    if chat:
        from ..llama.chat_template import chat_prompt_ids
        from .chat import messages_of

        prompt_ids = chat_prompt_ids(file, messages_of(prompt, system), chat_template)
    else:
        prompt_ids = _prompt_ids(file, prompt)
    n_prompt = len(prompt_ids)
    if profile and n_tokens < 2:
        raise ValueError(f"--profile times decode steps: -n must be at least 2 (the first token comes from "
                         f"the prompt), got {n_tokens}")
    n_train = file.config.n_ctx_train
    larger_c = f"a larger -c (the model takes up to {n_train})"
    if ctx is not None and n_prompt > ctx:
        raise ValueError(f"the prompt ({counted(n_prompt, 'token')}) is longer than the context of {ctx} (-c) it "
                         f"was given: give {larger_c}" if ctx < n_train else
                         f"the prompt ({counted(n_prompt, 'token')}) is longer than the model's context length, "
                         f"{n_train}: give a shorter prompt")
    need = n_prompt + max(n_tokens - 1, 0)
    given = ctx
    if ctx is None:
        ctx = file.config.default_context(need)
    if need > ctx or need > n_train:
        fix = (f"the context is {given} (-c): give a smaller -n or {larger_c}"
               if given is not None and given < n_train and need <= n_train else
               f"the model's context length is {n_train}: give a smaller -n")
        raise ValueError(f"the prompt ({counted(n_prompt, 'token')}) and {counted(n_tokens, 'new token')} need "
                         f"{counted(need, 'position')}; {fix}")
    try:
        draft_file = None if draft is None else LlamaFile(draft, fuse)
    except (ValueError, OSError) as e:  # (naming the option: the model's file was read already)
        raise ValueError(f"--draft: {e}") from None
    if draft_file is not None:
        check_same_vocabulary(file, draft_file)  # refused before anything is uploaded
    decoder = load_model(model, engine=engine, path=path, activations=activations, ctx=ctx, fuse=fuse,
                         device=device, file=file, timestamps=timestamps, profile=profile, spread=spread,
                         fold=fold, launches=launches, prompt_chunk=ubatch, prompt_kernels=prompt_kernels)
    drafter = speculative
    if speculative is not None or draft_file is not None:  # (refused before the draft loads)
        limit = decoder.draft_limit(draft_max)
        if draft_max is not None and limit < draft_max:
            print(f"vkq generate: --draft-max {draft_max}: a step here verifies up to {limit} drafted tokens (with "
                  f"the token before them, {limit + 1} in one step): drafting up to {limit}", file=sys.stderr)
        draft_max = limit
    if draft_file is not None:  # on the target's engine and device, its context where the draft's allows
        drafter = DraftModel(decoder, load_model(draft, engine=engine, path=path, activations=activations,
                                                 ctx=min(decoder.ctx, draft_file.config.n_ctx_train), fuse=fuse,
                                                 backend=getattr(decoder, "backend", None), file=draft_file),
                             P_MIN if draft_p_min is None else draft_p_min)
    if drafter is not None:
        decoder.drafter(drafter, draft_max)  # refused before any text is printed
    load_s = time.perf_counter() - t0
    chained = dict(steps_per_submit=steps_per_submit, n_tokens=n_tokens) if steps_per_submit > 1 else {}
    warm = decoder.warm_up(n_prompt, speculative=drafter is not None, sampling=sampling, **chained)
    if isinstance(drafter, DraftModel):
        warm += drafter.warm_up(n_prompt)
    cfg = file.config
    backend = getattr(decoder, "backend", None)
    dev = "numpy float64 (reference)" if backend is None else backend.device_info.name
    experts = f", {cfg.n_expert} experts ({cfg.n_expert_used} used)" if cfg.is_moe else ""
    print(f"{file.path.name}: {cfg.arch}, {cfg.n_layer} layers, {cfg.n_embd} wide, {cfg.n_head}/{cfg.n_head_kv} "
          f"heads{experts}, vocab {file.n_vocab}; loaded in {load_s:.1f} s on {dev}, pipelines recorded in "
          f"{warm:.1f} s{_prompt_kernels_text(decoder)}", file=sys.stderr)
    if not chat:
        print(prompt, end="", flush=True)
    try:
        _, _, stats = decoder.generate_ids(prompt_ids, n_tokens, stop_at_eos=not ignore_eos,
                                           on_text=lambda s: print(s, end="", flush=True), speculative=drafter,
                                           draft_max=draft_max, steps_per_submit=steps_per_submit,
                                           sampling=sampling, stop=stop)
    finally:
        print(flush=True)  # the text ends its line, whole or cut short (Ctrl-C)
    print(stats.summary(), file=sys.stderr)
    if profile:
        if not stats.decode_steps:
            raise ValueError("no decode step to profile: the model stopped at its end-of-text token first "
                             "(--ignore-eos)")
        # (chained steps: the longest chain's submits, each op per submit and its time per token)
        chain = max((m for m in range(2, steps_per_submit + 1) if decoder.profiled_steps(m, chained=True)), default=0)
        prof = decoder.profile(decoder.profiled_steps(chain, chained=True), chain, chained=True) if chain \
            else decoder.profile(stats.decode_steps)
        prof = replace(prof, wall_seconds=stats.ms_per_token / 1e3)
        what = f"a submit of {chain} chained decode steps" if chain else "a decode step"
        print(f"\nprofile of {what} ({prof.summary()}):\n{prof.table()}", file=sys.stderr)
        # (the prompt's largest chunk: a prompt shorter than prompt_chunk is one chunk of its own size)
        chunk = max((n for n in range(2, decoder.prompt_chunk + 1) if decoder.profiled_steps(n)), default=0)
        if chunk:
            prof = decoder.profile(decoder.profiled_steps(chunk), chunk)
            print(f"\nprofile of the prompt's chunks of {chunk} tokens ({prof.summary()}):\n{prof.table()}",
                  file=sys.stderr)
    if shape is not None:
        whose = "this device's" if launches is None else f"{launches}'s (forced here)"
        matvecs = ("the mat-vecs' launches this device's table's" if launches is None else
                   f"the mat-vecs' paths and launches as the table of {GPU_LAUNCH_CAPS[launches].table_class.key} "
                   f"chooses them, not run here; the other ops as recorded on this device's paths")
        print(f"\nlaunches of a decode step, {whose}, at a full context of {decoder.ctx} positions (serial depth: "
              f"loop iterations with global loads one invocation runs in a row; {matvecs}):\n"
              f"{shape_table(decoder.step_launches())}", file=sys.stderr)
    return 0


def compare_engines(model: str | Path, prompt: str, n_tokens: int = 48, *, rounds: int = 3, path: str = "auto",
                    activations: str = GENERATE_ACTIVATIONS, fuse: bool = True, device: int | None = None) -> int:
    """Prompt and decode speed of vkq's engines side by side in one run: the
    graph engine (prompt in chunks, on the device's prompt kernels), the graph engine fed
    the prompt token by token, and the host engine; the same uploaded
    weights, prompt and tokens, rounds alternating between them (so that load
    from other processes falls on all alike), then one round of the graph
    engine with GPU timestamps for its kernels' share of the step
    (timestamps slow the step down, so the speeds are from untimed rounds).
    Prints each round and the medians; returns 1 if the tokens differ."""
    import statistics

    from ..llama.gpu_step import GpuLlama, check_graph_engine

    if n_tokens < 2:
        raise ValueError(f"--compare-engines times decode steps: -n must be at least 2 (the first new token comes "
                         f"from the prompt), got {n_tokens}")
    if path == "numpy":
        raise ValueError("--compare-engines times vkq's engines; path numpy is the reference, on none")
    file = LlamaFile(model, fuse)
    check_graph_engine(file)
    ids = _prompt_ids(file, prompt)
    ctx = len(ids) + n_tokens
    backend = Backend(device)
    host = LlamaModel(None, backend, path, activations=activations, fuse=fuse, ctx=ctx, file=file)

    def graph(**kw) -> GpuLlama:  # on the host engine's uploads
        return GpuLlama(None, backend, path, activations=activations, ctx=ctx, file=file, weights=host.matvecs, **kw)

    engines = {"graph": graph(), "graph, prompt token by token": graph(prompt_chunk=1, prompt_kernels="matvec"),
               "host": host,
               "graph, timed": graph(timestamps=True)}
    for d in engines.values():
        d.warm_up(len(ids))
    pp: dict[str, list[float]] = {name: [] for name in engines}
    tg: dict[str, list[float]] = {name: [] for name in engines}
    tokens: dict[str, list[int]] = {}
    stats = {}
    for r in range(rounds + 1):
        for name, d in engines.items():
            if (name == "graph, timed") != (r == rounds):
                continue
            gen = d.greedy(ids, n_tokens, stop_at_eos=False)
            tokens.setdefault(name, gen.tokens)
            pp[name].append(gen.stats.prompt_tokens_per_second)
            tg[name].append(gen.stats.tokens_per_second)
            stats[name] = gen.stats
            print(f"round {r + 1}, {name}: pp {gen.stats.prompt_tokens_per_second:.2f} t/s; "
                  f"{gen.stats.summary().splitlines()[1]}")
    same = all(t == tokens["host"] for t in tokens.values())
    pp_med = {name: statistics.median(v) for name, v in pp.items()}
    tg_med = {name: statistics.median(v) for name, v in tg.items()}
    timed = stats["graph, timed"]
    print(f"{file.path.name}, {len(ids)} prompt tokens, {n_tokens} new tokens, {rounds} rounds on "
          f"{backend.device_info.name} (medians):")
    print(f"  prompt (pp): graph {pp_med['graph']:.2f} t/s in chunks of {engines['graph'].prompt_chunk} "
          f"({engines['graph'].prompt_kernels}), "
          f"{pp_med['graph, prompt token by token']:.2f} t/s token by token "
          f"({pp_med['graph'] / pp_med['graph, prompt token by token']:.2f}x); host {pp_med['host']:.2f} t/s")
    graph_submits, host_submits = (submits_per_token(stats[e].submits_per_token) for e in ("graph", "host"))
    print(f"  decode (tg): graph {tg_med['graph']:.2f} t/s ({graph_submits}; kernels {100 * timed.device_share:.0f}% "
          f"of the step in a timed round, {timed.tokens_per_second:.2f} t/s) vs host {tg_med['host']:.2f} t/s "
          f"({host_submits}): {tg_med['graph'] / tg_med['host']:.2f}x")
    print(f"  same tokens on every engine: {'yes' if same else 'NO'}")
    return 0 if same else 1
