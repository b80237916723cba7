"""Whole models side by side: vkq generate and llama.cpp on the same files and device.

For each GGUF file (a llama-architecture model, dense or mixture of
experts), from the same prompt token ids, greedy, EOS ignored:
- vkq's graph engine (its defaults: the dispatcher's paths, the prompt in
  chunks): prompt (pp) and generation (tg) tokens per second, the median of
  `rounds` runs after one untimed run; dispatches, barriers and submits per
  token;
- llama.cpp's llama-server (vkq.commands.llama_server: its Vulkan backend, every
  layer on the device), the same prompt and token count: its own timings,
  the median of `rounds` runs after one untimed run;
- their ratios, whether both decoded the same tokens (and where they first
  differ; where llama-server cannot run or fails, vkq's figures stand and
  the row says why in words), and vkq's tg as a share of the device's memory bandwidth: the
  bytes a token reads (every weight matrix; of an expert stack, the used
  experts': vkq.commands.presets.from_gguf) times tg, over the device's measured
  read bandwidth (the caller's: vkq report probes it).

The engines run one after the other, each on its own; nothing else should
run on the device meanwhile.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

from ..markdown import markdown

# A prompt of ordinary prose; `prompt_ids` repeats it to the length asked.
TEXT = ("The history of the printing press begins in the fifteenth century, when a goldsmith in Mainz set out to "
        "print books with movable metal type. His press combined older ideas: the screw press of the vineyards, "
        "oil-based inks and a hand mould for casting letters. Within fifty years presses worked in many cities. ")


@dataclass(frozen=True)
class RaceRow:
    """One model: vkq's figures, llama.cpp's (None where it did not run), and how they compare."""

    model: str
    main_type: str  # the block type of most weight bytes
    n_prompt: int
    n_tokens: int
    vkq_pp: float  # tokens per second
    vkq_tg: float
    llama_pp: float | None  # None: llama.cpp not run
    llama_tg: float | None
    same_tokens: int  # leading generated tokens both engines agree on
    bytes_per_token: int
    bw_pct: float  # vkq tg x bytes per token, over the measured bandwidth
    dispatches: int
    barriers: int
    submits_per_token: float
    llama_error: str | None = None  # why llama.cpp has no figures, where it was to run and failed

    @property
    def tg_ratio(self) -> float | None:
        return self.vkq_tg / self.llama_tg if self.llama_tg else None

    @property
    def pp_ratio(self) -> float | None:
        return self.vkq_pp / self.llama_pp if self.llama_pp else None


def prompt_ids(tokenizer, n_prompt: int) -> list[int]:
    """n_prompt token ids of TEXT, repeated as often as it takes."""
    ids = tokenizer.encode(TEXT)
    while len(ids) < n_prompt:
        ids += tokenizer.encode(TEXT, add_special=False)  # one BOS, at the start
    return ids[:n_prompt]


def check_token_counts(n_prompt, n_tokens) -> None:
    """pp needs a prompt token, tg a decode step: the first new token comes
    from the prompt's logits, so a decode speed needs two new tokens."""
    for what, n, least in (("n_prompt", n_prompt, 1), ("n_gen", n_tokens, 2)):
        if not isinstance(n, int) or isinstance(n, bool) or n < least:
            raise ValueError(f"{what} must be at least {least} {'new ' if least > 1 else ''}token"
                             f"{'s' if least > 1 else ''}, got {n!r}"
                             + (": the first comes from the prompt's logits, so a decode speed needs a decode step "
                                "after it" if least > 1 else ""))


def _main_type(model) -> str:
    by_type: dict[str, int] = {}
    for m in model.matrices:
        by_type[m.qtype] = by_type.get(m.qtype, 0) + m.nbytes
    return max(by_type, key=by_type.get)


def race_model(backend, path: str | Path, *, n_prompt: int, n_tokens: int, rounds: int, membw: float,
               llama_server: str | Path | None = None, run_llama: bool = True) -> RaceRow:
    """One model's row. membw: the device's read bandwidth, bytes/s;
    llama_server: llama-server's path (default the wheel's); run_llama: False
    leaves llama.cpp out."""
    from ..llama.loading import load_model
    from ..llama.model import LlamaFile
    from .llama_server import LlamaCppUnavailable, LlamaServer, LlamaServerFailed
    from .presets import from_gguf

    check_token_counts(n_prompt, n_tokens)
    path = Path(path)
    file = LlamaFile(path)
    ids = prompt_ids(file.tokenizer, n_prompt)
    ctx = n_prompt + n_tokens
    decoder = load_model(path, backend=backend, ctx=ctx, file=file)
    decoder.warm_up(n_prompt)
    runs = [decoder.greedy(ids, n_tokens, stop_at_eos=False) for _ in range(rounds + 1)][1:]
    stats = [r.stats for r in runs]
    vkq_tokens = runs[0].tokens
    llama_pp = llama_tg = llama_error = None
    same = 0
    done = None
    if run_llama:
        try:  # (llama.cpp wants room past the last token, and its context in whole pages)
            with LlamaServer(path, ctx=max(256, ctx + 1), server=llama_server, device=backend.device_info.index) as srv:
                done = [srv.complete(ids, n_tokens) for _ in range(rounds + 1)][1:]
        except (LlamaServerFailed, LlamaCppUnavailable) as e:  # vkq's figures stand without llama.cpp's
            llama_error = str(e)
    if done:
        llama_pp = statistics.median(c.prompt_tps for c in done)
        llama_tg = statistics.median(c.decode_tps for c in done)
        for a, b in zip(vkq_tokens, done[0].tokens):
            if a != b:
                break
            same += 1
    model = from_gguf(path)
    tg = statistics.median(s.tokens_per_second for s in stats)
    return RaceRow(path.name, _main_type(model), n_prompt, n_tokens,
                   statistics.median(s.prompt_tokens_per_second for s in stats), tg, llama_pp, llama_tg, same,
                   model.bytes_per_token, 100 * tg * model.bytes_per_token / membw,
                   stats[0].dispatches, stats[0].barriers, statistics.median(s.submits_per_token for s in stats),
                   llama_error)


def _ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def _tps(x: float | None) -> str:
    return "not run" if x is None else f"{x:.2f}"


def render_md(rows: list[RaceRow]) -> str:
    cells = [[r.model, r.main_type, f"pp{r.n_prompt}", _tps(r.llama_pp), f"{r.vkq_pp:.2f}", _ratio(r.pp_ratio),
              f"tg{r.n_tokens}", _tps(r.llama_tg), f"{r.vkq_tg:.2f}", _ratio(r.tg_ratio), f"{r.bw_pct:.0f}%",
              f"{r.same_tokens}/{r.n_tokens}" if r.llama_tg is not None else "-",
              f"{r.dispatches}/{r.barriers}"] for r in rows]
    return markdown(["model", "type", "pp", "llama.cpp t/s", "vkq t/s", "vkq / llama.cpp", "tg", "llama.cpp t/s",
                     "vkq t/s", "vkq / llama.cpp ", "vkq % bw", "same tokens", "dispatches/barriers"], cells,
                    {"llama.cpp t/s", "vkq t/s", "vkq / llama.cpp", "vkq / llama.cpp ", "vkq % bw", "same tokens"})
