#!/usr/bin/env bash
# bench/multi30k_quality.sh: BLEU of a small Transformer trained for a fixed wall-clock budget.
#
# Trains the hparams set HPARAMS (default transformer_multi30k: 2+2 layers of d_model 256, found
# by t2t-lite-tune, see its docstring) on multi30k_ende (joint 8k BPE) for MINUTES (default 40)
# of wall-clock time. Every 500 steps it evaluates, decoding DEV_SENTENCES dev sentences, and
# keeps the best model by the paper's BLEU on them (model_dir/best); a checkpoint every 2
# minutes, the last 5 kept. The learning rate cools down to 0 over the last COOLDOWN_MINUTES of
# the budget, or from the second evaluation in a row that does not improve on the best
# (COOLDOWN_PATIENCE), the run ending when it is done: a longer budget does not train an
# overfitting model on at full rate. Where one core trains the model far enough in the budget,
# it trains two models side by side instead (seeds SEED and SEED + 1, one per half of the
# cores) and decodes them as an ensemble: see MODELS below. Then it decodes test_2016_flickr
# (the set's beam and alpha) with each model a run leaves: the last checkpoint, the last 5
# averaged, the best kept (and, with EMA_DECAY, the raw weights beside the averaged ones), and
# the ensemble of the runs' best models and of their averages, and prints one JSON line with
# sacreBLEU's and the paper's BLEU of each, the steps trained, the CPU steal time, and as
# "bleu" the headline: the ensemble's (or the one model's) best models' sacreBLEU.
# The bars: a PyTorch Transformer of d_model 256, 3+3 layers, trained 40 minutes here, scored
# 38.43; issue 42's, 41.0.
#
#   bash bench/multi30k_quality.sh                          # 40 minutes, the defaults
#   MINUTES=2 WORK=/tmp/q bash bench/multi30k_quality.sh    # a smoke run
#
# Environment: RAW_DIR (default ../shared/data/multi30k next to the repository), WORK (default
# /tmp/t2t_lite_multi30k_quality; its data/ is reused across runs, model/ is started afresh),
# MINUTES, XLA (1 = --xla, default 0: on a 2-core CPU XLA's per-bucket compilations cost more
# than they save), PRECISION (--mixed_precision, default auto: the fastest on this machine,
# e.g. bf16 with AMX, none on an Intel without it; the JSON records what it chose),
# HPARAMS, OVERRIDES (--hparams_overrides, e.g. dropout=0.3), BEAM and ALPHA (the test decodes';
# default: the set's), EMA_DECAY (--ema_decay, default 0.998; EMA_DECAY= turns it off),
# DEV_SENTENCES (--eval_decode_examples, default 1014: all of val, as the study selected),
# DECODE_PRECISION (t2t-lite-decode --precision, default auto), PROBLEM (default
# multi30k_ende), INIT_FROM (--init_from, to fine-tune), SEED (--seed, default 1),
# COOLDOWN_MINUTES (--cooldown_minutes, default a quarter of MINUTES), COOLDOWN_PATIENCE
# (--cooldown_patience, default 2: one dip of dev BLEU is within its noise and was followed by
# new bests; COOLDOWN_PATIENCE= cools down only at the budget's end), MODELS (1, 2 or auto, the
# default: a 150-step probe on half the cores projects the steps one model would make there in
# MINUTES; 2 if that reaches ENSEMBLE_MIN_STEPS, default 3500. Two models of ~3,700 steps each
# beat one of ~6,700 on dev, two of ~3,300 lost to it: the split pays only where each model
# nears the plateau the set reaches at ~5,000 steps, so it depends on the CPU and the budget).
# docs/benchmarks.md says how these defaults were chosen.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
RAW_DIR="${RAW_DIR:-$HERE/../../shared/data/multi30k}"
WORK="${WORK:-/tmp/t2t_lite_multi30k_quality}"
MINUTES="${MINUTES:-40}"
XLA="${XLA:-0}"
PRECISION="${PRECISION:-auto}"
HPARAMS="${HPARAMS:-transformer_multi30k}"
OVERRIDES="${OVERRIDES:-}"
EMA_DECAY="${EMA_DECAY-0.998}"
DEV_SENTENCES="${DEV_SENTENCES:-1014}"
DECODE_PRECISION="${DECODE_PRECISION:-auto}"
PROBLEM="${PROBLEM:-multi30k_ende}"
INIT_FROM="${INIT_FROM:-}"
SEED="${SEED:-1}"
COOLDOWN_MINUTES="${COOLDOWN_MINUTES:-$(awk "BEGIN{print $MINUTES / 4}")}"
COOLDOWN_PATIENCE="${COOLDOWN_PATIENCE-2}"
MODELS="${MODELS:-auto}"
ENSEMBLE_MIN_STEPS="${ENSEMBLE_MIN_STEPS:-3500}"
PY="${PYTHON:-python}"
TARGET="${PROBLEM#multi30k_en}"

if [[ ! -f "$RAW_DIR/test_2016_flickr.en.gz" ]]; then
  echo "multi30k_quality: $RAW_DIR lacks test_2016_flickr.en.gz (set RAW_DIR)" >&2
  exit 2
fi
# The CPUs this process may run on, and their two halves (one per model when there are two).
read -r -a cpus <<< "$("$PY" -c 'import os; print(*sorted(os.sched_getaffinity(0)))')"
half=$(( ${#cpus[@]} / 2 ))
all_cpus="$(IFS=,; echo "${cpus[*]}")"
halves=("$(IFS=,; echo "${cpus[*]:0:$half}")" "$(IFS=,; echo "${cpus[*]:$half}")")

if [[ ! "$MODELS" =~ ^(1|2|auto)$ || ! "$ENSEMBLE_MIN_STEPS" =~ ^[0-9]+$ ]]; then
  echo "multi30k_quality: MODELS must be 1, 2 or auto and ENSEMBLE_MIN_STEPS a number of" \
    "steps, not '$MODELS' and '$ENSEMBLE_MIN_STEPS'" >&2
  exit 2
fi
if [[ "$MODELS" == 2 ]] && (( half == 0 )); then
  echo "multi30k_quality: MODELS=2 trains one model per half of the CPUs; this has one" >&2
  exit 2
fi
mkdir -p "$WORK"
rm -rf "$WORK"/model "$WORK"/model2 "$WORK"/models "$WORK"/models2 "$WORK"/probe \
  "$WORK"/test*.hyp "$WORK"/test*.scores
xla_flag="--noxla"
[[ "$XLA" == 1 ]] && xla_flag="--xla"
extra=()
[[ -n "$EMA_DECAY" ]] && extra+=("--ema_decay=$EMA_DECAY")
[[ -n "$INIT_FROM" ]] && extra+=("--init_from=$INIT_FROM")
[[ -n "$COOLDOWN_PATIENCE" ]] && extra+=("--cooldown_patience=$COOLDOWN_PATIENCE")
beam_flags=()
[[ -n "${BEAM:-}" ]] && beam_flags+=("--beam_size=$BEAM")
[[ -n "${ALPHA:-}" ]] && beam_flags+=("--alpha=$ALPHA")

# CPU time the hypervisor gave to other guests ("steal"), as a fraction of all CPU time during
# training: on a shared VM it varies from run to run, and the step count with it.
cpu_ticks() { awk '/^cpu /{print $9, $2+$3+$4+$5+$6+$7+$8+$9}' /proc/stat 2>/dev/null || true; }
train() {  # train <cpus> <model_dir> <seed> [flag ...]: one t2t-lite-train run on those CPUs.
  local on="$1" dir="$2" seed="$3"
  shift 3
  taskset -c "$on" "$PY" -m t2t_lite.bin.train \
    --problem="$PROBLEM" --hparams="$HPARAMS" --hparams_overrides="$OVERRIDES" \
    --data_dir="$WORK/data_$PROBLEM" --raw_dir="$RAW_DIR" --model_dir="$dir" \
    --train_steps=1000000 --train_minutes="$MINUTES" \
    --checkpoint_every_minutes=2 --keep_checkpoints=5 \
    --eval_every=500 --eval_steps=10 --eval_decode_examples="$DEV_SENTENCES" \
    --best_metric=dev_metric --log_every=50 --cooldown_minutes="$COOLDOWN_MINUTES" \
    "$xla_flag" --mixed_precision="$PRECISION" --seed="$seed" "${extra[@]}" "$@"
}

probe_steps=
probe_seconds=
if [[ "$MODELS" == auto ]]; then
  MODELS=1
  if (( half > 0 )); then
    probe_start=$(date +%s)
    # Its last two progress windows (the first holds the tracing): tokens/s on half the cores,
    # over the tokens of a step, times the budget. Not part of the budget, as datagen is not.
    train "${halves[0]}" "$WORK/probe" "$SEED" --train_steps=150 --eval_every=1000000 \
      > "$WORK/probe.log" 2>&1 || { echo "multi30k_quality: the probe failed: $WORK/probe.log" >&2
                                    exit 1; }
    probe_steps=$("$PY" - "$WORK/probe.log" "$MINUTES" <<'EOF'
import re, sys
log, minutes = open(sys.argv[1]).read(), float(sys.argv[2])
rates = [float(r.replace(",", "")) for r in re.findall(r"([\d,]+) tok/s", log)][-2:]
tokens = int(re.search(r"(\d+) tokens a step", log).group(1))
print(int(sum(rates) / len(rates) / tokens * minutes * 60))
EOF
)
    rm -rf "$WORK/probe"
    probe_seconds=$(( $(date +%s) - probe_start ))
    if (( probe_steps >= ENSEMBLE_MIN_STEPS )); then MODELS=2; fi
  fi
  echo "multi30k_quality: MODELS=auto chose $MODELS: one model on half the cores would make" \
    "~${probe_steps:-0} steps in $MINUTES minutes (two from $ENSEMBLE_MIN_STEPS)" >&2
fi

ticks_before=$(cpu_ticks)
start=$(date +%s)
if (( MODELS == 2 )); then
  trap 'kill $(jobs -p) 2> /dev/null || true' EXIT
  train "${halves[1]}" "$WORK/model2" $(( SEED + 1 )) > "$WORK/train2.log" 2>&1 &
  second=$!
  train "${halves[0]}" "$WORK/model" "$SEED" 2>&1 | tee "$WORK/train.log"
  wait "$second" || { echo "multi30k_quality: seed $(( SEED + 1 )) failed: $WORK/train2.log" >&2
                      exit 1; }
else
  train "$all_cpus" "$WORK/model" "$SEED" 2>&1 | tee "$WORK/train.log"
fi
train_seconds=$(( $(date +%s) - start ))
ticks_after=$(cpu_ticks)

# The models each run leaves (in models$suffix), each a run directory: the last checkpoint,
# the last 5 averaged (fewer in a smoke run), the best kept; with EMA_DECAY each also with its
# raw weights.
suffixes=("")
(( MODELS == 2 )) && suffixes+=("2")
for suffix in "${suffixes[@]}"; do
  "$PY" - "$WORK/model$suffix" "$WORK/models$suffix" "$EMA_DECAY" <<'EOF'
import sys
from t2t_lite.rundir import checkpoints
from t2t_lite.train import averaging
model_dir, models, ema = sys.argv[1:]
paths = checkpoints.list_checkpoints(model_dir)
variants = {"last": (model_dir, [paths[-1]]), "avg5": (model_dir, paths[-5:]),
            "best": (f"{model_dir}/best", checkpoints.list_checkpoints(f"{model_dir}/best"))}
for name, (source, prefixes) in variants.items():
  for averages in ([True, False] if ema and name != "best" else [True]):
    out = f"{models}/{name}" + ("" if averages or not ema else "_raw")
    averaging.average(source, prefixes, out, averages)
EOF
done

"$PY" - "$RAW_DIR" "$WORK" "$TARGET" <<'EOF'
import gzip, sys
raw, work, target = sys.argv[1:]
for lang in ("en", target):
  with gzip.open(f"{raw}/test_2016_flickr.{lang}.gz", "rt", encoding="utf-8") as f:
    text = f.read()
  with open(f"{work}/test.{lang}", "w", encoding="utf-8") as f:
    f.write(text)
EOF

decode() {  # decode <output name> <model dir> [<model dir>]: test_2016_flickr, one ensemble.
  local name="$1"
  shift
  "$PY" -m t2t_lite.bin.decode "${@/#/--model_dir=}" --input_file="$WORK/test.en" \
    --output_file="$WORK/$name.hyp" --reference_file="$WORK/test.$TARGET" \
    "${beam_flags[@]}" --no_progress --precision="$DECODE_PRECISION" 2> "$WORK/$name.scores"
}
for suffix in "${suffixes[@]}"; do
  for model in "$WORK/models$suffix"/*; do
    decode "test$suffix.$(basename "$model")" "$model"
  done
done
if (( MODELS == 2 )); then
  for name in best avg5; do
    decode "test_ensemble.$name" "$WORK/models/$name" "$WORK/models2/$name"
  done
fi

"$PY" - "$WORK" "$train_seconds" "$PRECISION" "$ticks_before" "$ticks_after" "$PROBLEM" \
  "$OVERRIDES" "$EMA_DECAY" "$MINUTES" "$SEED" "$COOLDOWN_MINUTES" "$COOLDOWN_PATIENCE" \
  "$HPARAMS" "$MODELS" "$probe_steps" "$probe_seconds" <<'EOF'
import glob, json, os, re, sys
work, seconds, precision = sys.argv[1], int(sys.argv[2]), sys.argv[3]
before, after = sys.argv[4].split(), sys.argv[5].split()  # [steal, total] ticks, or empty
steal = None
if before and after and int(after[1]) > int(before[1]):
  steal = round((int(after[0]) - int(before[0])) / (int(after[1]) - int(before[1])), 3)

def scores(prefix):  # {model name: its sacreBLEU and paper BLEU} of the decodes named prefix.*
  models = {}
  for path in sorted(glob.glob(f"{work}/{prefix}.*.scores")):
    line = json.loads(open(path).read().strip().splitlines()[-1])
    models[path.split(".")[-2]] = {"bleu": round(line["bleu"], 2),
                                   "paper_bleu": round(line["paper_bleu"], 2)}
  return models

runs, logs = [], []
for i, suffix in enumerate([""] + (["2"] if sys.argv[14] == "2" else [])):
  logs.append(open(f"{work}/train{suffix}.log").read())
  steps = [int(s) for s in re.findall(r"^done: step (\d+)", logs[-1], re.M)]
  runs.append({"seed": int(sys.argv[10]) + i, "train_steps": steps[-1] if steps else 0,
               "best": json.load(open(f"{work}/model{suffix}/best/best.json")),
               "models": scores(f"test{suffix}")})
ensemble = scores("test_ensemble") or None
chosen = re.search(r"^computing in (\S+) \((.*)\)$", logs[0], re.M)  # the trainer's first line
decoded = re.search(r"; precision (\S+) \(", open(f"{work}/test.best.scores").read())
print(json.dumps({"bench": "multi30k_quality", "problem": sys.argv[6],
                  "split": "test_2016_flickr",
                  "bleu": (ensemble or runs[0]["models"])["best"]["bleu"],
                  "models_trained": len(runs), "probe_steps": int(sys.argv[15] or 0) or None,
                  "probe_seconds": int(sys.argv[16] or 0) or None,
                  "ensemble": ensemble, "runs": runs,
                  "minutes": float(sys.argv[9]), "train_seconds": seconds,
                  "hparams": sys.argv[13], "overrides": sys.argv[7],
                  "ema_decay": sys.argv[8] or None, "mixed_precision": precision,
                  "trained_in": chosen and chosen.group(1), "why": chosen and chosen.group(2),
                  "decoded_in": decoded and decoded.group(1),
                  "init_from": os.environ.get("INIT_FROM") or None,
                  "cooldown_minutes": float(sys.argv[11]),
                  "cooldown_patience": int(sys.argv[12]) if sys.argv[12] else None,
                  "cpu_steal": steal, "bar_bleu": 41.0,
                  "cpu": os.popen("lscpu | sed -n 's/^Model name: *//p'").read().strip()}))
EOF
