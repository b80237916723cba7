"""`vkq chat`: a conversation with a chat model, its turns rendered by the
model's chat template (vkq.llama.chat_template), the KV cache kept between
turns (only a new turn's tokens are fed); and the sampling options that
`vkq chat` and `vkq generate` share (llama.cpp's names).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ..blocks.activations import GENERATE_ACTIVATIONS
from ..llama.sampling import LLAMA_CPP_DEFAULTS, REPEAT_LAST_N_MAX, TOP_K_MAX, Sampling

CHAT_CONTEXT = 2048  # vkq chat's default context (where the model's is longer): room for a few turns
# The options that act only where the temperature is above 0.
_SAMPLING_ONLY = (("top_k", "--top-k"), ("top_p", "--top-p"), ("min_p", "--min-p"), ("seed", "--seed"))


def add_sampling_options(p: argparse.ArgumentParser) -> None:
    """--temp, --top-k, --top-p, --min-p, --repeat-penalty, --repeat-last-n, --seed and --stop."""
    d = LLAMA_CPP_DEFAULTS
    g = p.add_argument_group("sampling (llama.cpp's sampler chain, in its order: repeat penalty, top-k, top-p, "
                             "min-p, temperature; on the device)")
    g.add_argument("--temp", type=float, default=None, metavar="T",
                   help=f"temperature (default 0: greedy, the largest logit; llama.cpp's default is {d['temp']})")
    g.add_argument("--top-k", type=int, default=None, metavar="K",
                   help=f"keep the K most likely tokens (default {d['top_k']}; 0: all, sampled on the host; the "
                        f"device takes 1 to {TOP_K_MAX})")
    g.add_argument("--top-p", type=float, default=None, metavar="P",
                   help=f"then the fewest whose probability sums to P (default {d['top_p']}; 1: off)")
    g.add_argument("--min-p", type=float, default=None, metavar="P",
                   help=f"then those at least P times as likely as the most likely (default {d['min_p']}; 0: off)")
    g.add_argument("--repeat-penalty", type=float, default=None, metavar="F",
                   help="divide the logits of the last --repeat-last-n tokens by F (multiply where negative; "
                        "default 1: off)")
    g.add_argument("--repeat-last-n", type=int, default=None, metavar="N",
                   help=f"the tokens the repeat penalty looks back on (default {d['repeat_last_n']}; 0 to "
                        f"{REPEAT_LAST_N_MAX})")
    g.add_argument("--seed", type=int, default=None,
                   help="the sampler's seed, 0 to 2**32 - 1 (default: a random one, printed with the statistics); "
                        "the same seed gives the same text on either engine")
    g.add_argument("--stop", action="append", default=[], metavar="TEXT",
                   help="end the generation where the text holds TEXT (left out of it); repeatable")


def sampling_from(args) -> Sampling | None:
    """The Sampling the options ask for (None: greedy, no option given);
    options that act only with a temperature above 0 get a warning when
    given without one."""
    given = {name: getattr(args, name) for name in ("temp", "top_k", "top_p", "min_p", "repeat_penalty",
                                                    "repeat_last_n", "seed") if getattr(args, name) is not None}
    if not given:
        return None
    s = Sampling(**{"temp": 0.0, **given})
    if s.temp == 0:
        idle = [flag for name, flag in _SAMPLING_ONLY if name in given]
        if idle:
            print(f"vkq: warning: {', '.join(idle)} act only with --temp above 0 (the default 0 is greedy)",
                  file=sys.stderr)
    return s


def read_prompt(prompt: str | None, prompt_file: str | None) -> str:
    """-p TEXT or -f FILE (UTF-8; one of them)."""
    if (prompt is None) == (prompt_file is None):
        raise ValueError("give the prompt with -p TEXT or -f FILE (one of them)")
    if prompt is not None:
        return prompt
    try:
        return Path(prompt_file).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"-f {prompt_file}: not UTF-8 text") from None
    except OSError as e:
        raise ValueError(f"-f {prompt_file}: cannot read it ({e.strerror or e})") from None


def messages_of(prompt: str, system: str | None) -> list[dict]:
    """One user turn, after a system message where one is given."""
    return ([{"role": "system", "content": system}] if system is not None else []) + \
        [{"role": "user", "content": prompt}]


def _read_turn(stdin) -> str | None:
    """A line of the user's (None at the end of the input): at a terminal
    with a prompt and line editing (readline, where Python has it)."""
    if stdin is sys.stdin and stdin.isatty():
        try:
            import readline  # noqa: F401 - input() edits lines and keeps a history once it is loaded
        except ImportError:
            pass
        try:
            return input("> ")
        except EOFError:
            print()
            return None
    line = stdin.readline()
    return line or None


def chat(model: str | Path, *, n_tokens: int = -1, engine: str = "graph", path: str = "auto",
         activations: str = GENERATE_ACTIVATIONS, ctx: int | None = None, device: int | None = None,
         sampling: Sampling | None = None, system: str | None = None, template: str | None = None,
         stop: list[str] | tuple[str, ...] = (), steps_per_submit: int = 1, stdin=None) -> int:
    """The command: reads the user's turns from stdin (a line each; /exit or
    end of input ends it), prints each reply as it is generated (stdout) and
    a line of its statistics and why it stopped (stderr); Ctrl-C during a
    reply drops that turn, at the prompt it ends the chat. n_tokens: the
    most tokens of a reply (-1: to the context's end)."""
    from ..llama.chat_template import chat_prompt_ids
    from ..llama.loading import load_model
    from ..llama.model import LlamaFile

    if isinstance(n_tokens, bool) or not isinstance(n_tokens, int) or n_tokens < -1 or n_tokens == 0:
        raise ValueError(f"-n {n_tokens}: the most tokens of a reply, 1 or more (-1: to the context's end)")
    stdin = sys.stdin if stdin is None else stdin
    if sampling is not None:
        sampling = sampling.resolved()  # (one seed for the conversation, said in the banner)
    t0 = time.perf_counter()
    file = LlamaFile(model)
    first = chat_prompt_ids(file, messages_of("Hello", system), template)  # (a template that fails: said now)
    if ctx is None:
        ctx = file.config.default_context(CHAT_CONTEXT)
    decoder = load_model(model, engine=engine, path=path, activations=activations, ctx=ctx, device=device,
                         file=file)
    warm = decoder.warm_up(len(first), sampling=sampling)
    backend = getattr(decoder, "backend", None)
    dev = "numpy float64 (reference)" if backend is None else backend.device_info.name
    how = "greedy" if sampling is None or sampling.greedy else sampling.describe()
    print(f"{file.path.name}: loaded in {time.perf_counter() - t0 - warm:.1f} s on {dev}, pipelines recorded in "
          f"{warm:.1f} s; a context of {decoder.ctx} positions; {how}. Type a message; /exit or Ctrl-D ends "
          "the chat.", file=sys.stderr)
    messages = [] if system is None else [{"role": "system", "content": system}]
    while True:
        line = _read_turn(stdin)
        if line is None:  # (end of input, Ctrl-D)
            return 0
        text = line.rstrip("\n")
        if text.strip() == "/exit":
            return 0
        if not text.strip():
            continue
        messages.append({"role": "user", "content": text})
        try:
            reply, _, stats = decoder.chat(messages, n_tokens, template=template, sampling=sampling, stop=stop,
                                           on_text=lambda s: print(s, end="", flush=True),
                                           steps_per_submit=steps_per_submit)
        except KeyboardInterrupt:  # (Ctrl-C ends the reply, not the chat: the turn is dropped)
            print(flush=True)
            print("[interrupted: the turn is dropped]", file=sys.stderr)
            messages.pop()
            continue
        print(flush=True)
        rate = stats.tokens_per_second
        print(f"[{stats.n_generated} tokens" + ("" if rate is None else f", {rate:.1f} t/s")
              + f"; prompt {stats.n_prompt} new tokens; stopped at {stats.stop_reason}]", file=sys.stderr)
        messages.append({"role": "assistant", "content": reply})
