#!/usr/bin/env bash
# bench/ptb_quality.sh: EVALB bracket F1 of a parser trained for a fixed wall-clock budget.
#
# Trains transformer_parsing_spans (the span-classifying parser: a 4-layer encoder of d_model
# 256 labelling every span, CKY for the tree, bracket offset 1.0; modeling/span_parser.py) on
# wsj_parsing_spans (word vocabulary, the span labels and tags in the records: the problem's
# defaults, see problems/wsj_parsing_spans.py) from RAW_DIR's .mrg files for MINUTES of
# wall-clock time, the learning rate cooled to 0 over the last quarter, with
# dev bracket F1 at every evaluation, averages the last 5 checkpoints, decodes the test split
# (or every tree of TEST_DIR's .mrg files) with the set's decoding (the translating parser:
# its beam with the tree constraint, t2t_lite/parsing/tree_constraint.py),
# scores it as EVALB with COLLINS.prm (t2t_lite/parsing/evalb.py), writes EVALB's per-sentence report
# to $WORK/test.<MINUTES>.evalb and prints ONE JSON line: precision, recall, f1, exact_match,
# sentences scored / skipped / rejected, outputs that needed repair, steps trained, the last dev
# F1, the load average and the CPU steal time during training; with AT_MINUTES="10 20", also
# f1, exact match and steps of the checkpoints averaged as a 10- and a 20-minute run would.
# The bar (issue 42): F1 >= 80 on the sample's test split in 40 minutes on a 2-core CPU (issue
# 14's was 70).
#
#   bash bench/ptb_quality.sh                            # 40 minutes
#   MINUTES=2 WORK=/tmp/p bash bench/ptb_quality.sh      # a smoke run
#
# Environment: RAW_DIR (default ../shared/data/ptb_sample next to the repository), TEST_DIR
# (optional: score these .mrg files' trees instead of the test split), WORK (default
# /tmp/t2t_lite_ptb_quality; data/ is reused across runs, model/ is started afresh), MINUTES,
# AT_MINUTES (earlier marks to score too, e.g. "10 20"),
# PROBLEM (default wsj_parsing_spans; wsj_parsing with HPARAMS=transformer_parsing_small, the
# translating parser), HPARAMS (default transformer_parsing_spans), OVERRIDES (hparams
# overrides, e.g. bracket_offset=0.5), BEAM and ALPHA
# (default: the hparams set's), DEV_EXAMPLES (dev sentences decoded at each
# evaluation, default 50; 0 = no dev F1; their decoding counts in MINUTES), EVAL_EVERY (steps,
# default 1000), PROBLEM_SETTINGS (train's --problem_settings, e.g. "target_tags=all"; use a
# fresh WORK with them),
# PRECISION (training's --mixed_precision, default auto: the fastest on this machine, see
# docs/benchmarks.md; none = float32; the JSON records what it chose),
# DECODE_PRECISION (the test decodes' --precision, default auto), COOLDOWN_MINUTES (train's
# --cooldown_minutes: the learning rate falls linearly to 0 over the budget's last minutes;
# default a quarter of MINUTES, 0 = none; the earlier AT_MINUTES marks are then those of a run
# still before its cooldown),
# AVERAGE (the last checkpoints averaged at each mark, default 5), SEED (train's --seed,
# default 1: the seed-to-seed spread of a recipe).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
RAW_DIR="${RAW_DIR:-$HERE/../../shared/data/ptb_sample}"
TEST_DIR="${TEST_DIR:-}"
WORK="${WORK:-/tmp/t2t_lite_ptb_quality}"
MINUTES="${MINUTES:-40}"
AT_MINUTES="${AT_MINUTES:-}"
HPARAMS="${HPARAMS:-transformer_parsing_spans}"
export PROBLEM="${PROBLEM:-wsj_parsing_spans}"
OVERRIDES="${OVERRIDES:-}"
DEV_EXAMPLES="${DEV_EXAMPLES:-50}"
EVAL_EVERY="${EVAL_EVERY:-1000}"
PRECISION="${PRECISION:-auto}"
DECODE_PRECISION="${DECODE_PRECISION:-auto}"
COOLDOWN_MINUTES="${COOLDOWN_MINUTES-$(awk -v m="$MINUTES" 'BEGIN { print m / 4 }')}"
[[ "$COOLDOWN_MINUTES" == 0 ]] && COOLDOWN_MINUTES=""
AVERAGE="${AVERAGE:-5}"
export SEED="${SEED:-1}"
PY="${PYTHON:-python}"

if ! ls "$RAW_DIR"/*.mrg >/dev/null 2>&1 && [[ -z "$(find "$RAW_DIR" -name '*.mrg' 2>/dev/null | head -1)" ]]; then
  echo "ptb_quality: no .mrg files under $RAW_DIR (set RAW_DIR)" >&2
  exit 2
fi
if [[ -n "$TEST_DIR" && -z "$(find "$TEST_DIR" -name '*.mrg' 2>/dev/null | head -1)" ]]; then
  echo "ptb_quality: no .mrg files under TEST_DIR=$TEST_DIR" >&2
  exit 2
fi
mkdir -p "$WORK"
rm -rf "$WORK/model" "$WORK"/avg_*
beam_flags=() cooldown_flags=()
[[ -n "$COOLDOWN_MINUTES" ]] && cooldown_flags+=("--cooldown_minutes=$COOLDOWN_MINUTES")
[[ -n "${BEAM:-}" ]] && beam_flags+=("--beam_size=$BEAM")
[[ -n "${ALPHA:-}" ]] && beam_flags+=("--alpha=$ALPHA")

cpu_ticks() { awk '/^cpu /{print $9, $2+$3+$4+$5+$6+$7+$8+$9}' /proc/stat 2>/dev/null || true; }
load_before=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || true)
ticks_before=$(cpu_ticks)
start=$(date +%s)
"$PY" -m t2t_lite.bin.train --problem_settings="${PROBLEM_SETTINGS:-}" \
  --problem="$PROBLEM" --hparams="$HPARAMS" --hparams_overrides="$OVERRIDES" \
  --data_dir="$WORK/data" --raw_dir="$RAW_DIR" --model_dir="$WORK/model" \
  --train_steps=1000000 --train_minutes="$MINUTES" \
  --checkpoint_every_minutes=2 --keep_checkpoints="$(( ${MINUTES%.*} / 2 + 6 ))" \
  --eval_every="$EVAL_EVERY" --eval_steps=10 --eval_decode_examples="$DEV_EXAMPLES" \
  --log_every=50 --noxla --mixed_precision="$PRECISION" --seed="$SEED" "${cooldown_flags[@]}" 2>&1 \
  | tee "$WORK/train.log"
train_seconds=$(( $(date +%s) - start ))
ticks_after=$(cpu_ticks)
load_after=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || true)

# For each minute mark (AT_MINUTES, then MINUTES): the average of the last AVERAGE checkpoints
# written by then (fewer if fewer were), into $WORK/avg_<mark>. Without a cooldown the
# learning-rate schedule does not depend on the budget, so the mark's average is what a run of
# that many minutes would decode.
"$PY" - "$WORK/model" "$start" "$AVERAGE" $AT_MINUTES "$MINUTES" <<'EOF'
import sys
import tensorflow as tf
from t2t_lite.train import averaging
model_dir, start, average, marks = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
state = tf.train.get_checkpoint_state(model_dir)
written = list(zip(state.all_model_checkpoint_paths, state.all_model_checkpoint_timestamps))
for mark in marks:
  paths = [path for path, time in written if time <= start + 60 * float(mark) + 30]
  if not paths:
    sys.exit(f"ptb_quality: no checkpoint was written in the first {mark} minutes")
  averaging.average(model_dir, paths[-average:], f"{model_dir}/../avg_{mark}")
EOF

# The sentences to parse and their gold trees (normalised as the problem reads them).
"$PY" - "$WORK" "$TEST_DIR" <<'EOF'
import os, sys
import t2t_lite
from t2t_lite.parsing import treebank
from t2t_lite.problems.wsj_parsing import find_mrg_files, read_trees
from t2t_lite.rundir import run_files
work, test_dir = sys.argv[1:]
settings = run_files.read_run(f"{work}/model").data_settings
problem = t2t_lite.get_problem(os.environ["PROBLEM"], **settings)
if test_dir:
  trees = [str(tree) for path in find_mrg_files(test_dir) for tree in read_trees(path)]
  sources = [" ".join(treebank.parse_tree(tree).words()) for tree in trees]
else:
  pairs = problem.text_pairs("test", f"{work}/data")
  sources = [source for source, _ in pairs]
  trees = [problem.example_to_tree(s, t, repair_punctuation=False) for s, t in pairs]
with open(f"{work}/test.src", "w", encoding="utf-8") as f:
  f.writelines(line + "\n" for line in sources)
with open(f"{work}/test.gold", "w", encoding="utf-8") as f:
  f.writelines(line + "\n" for line in trees)
EOF

decode_start=$(date +%s)
for mark in $AT_MINUTES "$MINUTES"; do
  "$PY" -m t2t_lite.bin.decode --model_dir="$WORK/avg_$mark" --input_file="$WORK/test.src" \
    --output_file="$WORK/test.$mark.hyp" --reference_file="$WORK/test.gold" \
    --evalb_report="$WORK/test.$mark.evalb" "${beam_flags[@]}" --no_progress \
    --precision="$DECODE_PRECISION" \
    2> "$WORK/decode.$mark.log" || { cat "$WORK/decode.$mark.log" >&2; exit 1; }
done
decode_seconds=$(( $(date +%s) - decode_start ))

PRECISION="$PRECISION" DECODE_PRECISION="$DECODE_PRECISION" COOLDOWN_MINUTES="$COOLDOWN_MINUTES" \
  "$PY" - "$WORK" "$train_seconds" "$decode_seconds" "$ticks_before" "$ticks_after" \
  "$load_before" "$load_after" "$HPARAMS" "$OVERRIDES" "${TEST_DIR:-test split}" \
  $AT_MINUTES "$MINUTES" <<'EOF'
import json, os, re, sys
import t2t_lite
from t2t_lite.rundir import checkpoints, run_files
(work, seconds, decode_seconds, before, after, load_before, load_after, hparams, overrides,
 test), marks = sys.argv[1:11], sys.argv[11:]
before, after = before.split(), after.split()  # [steal, total] ticks, or empty
steal = None
if before and after and int(after[1]) > int(before[1]):
  steal = round((int(after[0]) - int(before[0])) / (int(after[1]) - int(before[1])), 3)
sources = open(f"{work}/test.src", encoding="utf-8").read().splitlines()
gold = open(f"{work}/test.gold", encoding="utf-8").read().splitlines()
problem = t2t_lite.get_problem(os.environ["PROBLEM"],
                               **run_files.read_run(f"{work}/model").data_settings)


def result(mark):
  """The scores of the test decode of avg_<mark>."""
  hyps = open(f"{work}/test.{mark}.hyp", encoding="utf-8").read().splitlines()
  # Decode prints trees over the sentences' words; one that is not needs the repair.
  gold_trees, predicted = problem.scored_trees(sources, hyps, gold)
  repaired = sum(tree != h for tree, h in zip(predicted, hyps))
  scores = problem.bracket_f1(gold_trees, predicted)
  averaged = run_files.read_json(f"{work}/avg_{mark}/averaged.json")["averaged"]
  return {"precision": round(scores["precision"], 2), "recall": round(scores["recall"], 2),
          "f1": round(scores["f1"], 2), "exact_match": round(scores["exact_match"], 2),
          "sentences": scores["sentences"], "scored": scores["scored"],
          "skipped": scores["skipped"], "rejected": scores["rejected"], "repaired": repaired,
          "steps": checkpoints.checkpoint_step(averaged[-1]), "averaged": len(averaged)}


results = {mark: result(mark) for mark in marks}
final = results[marks[-1]]
log = open(f"{work}/train.log").read()
dev = re.findall(r"dev_bracket_f1 ([0-9.]+)", log)
print(json.dumps({
    "bench": "ptb_quality", "problem": os.environ["PROBLEM"], "hparams": hparams,
    "overrides": overrides, "problem_settings": problem.settings(), "test": test,
    "seed": int(os.environ["SEED"]),
    "train_precision": os.environ["PRECISION"],
    "trained_in": (re.findall(r"^computing in (\S+)", log, re.M) or [None])[0],
    "decode_precision": os.environ["DECODE_PRECISION"],
    "cooldown_minutes": float(os.environ["COOLDOWN_MINUTES"] or 0) or None,
    **final, "minutes": float(marks[-1]),
    "at_minutes": {mark: {k: results[mark][k] for k in ("f1", "exact_match", "steps")}
                   for mark in marks[:-1]},
    "train_seconds": int(seconds), "decode_seconds": int(decode_seconds),
    "last_dev_f1": float(dev[-1]) if dev else None,
    "loadavg_before": load_before, "loadavg_after": load_after, "cpu_steal": steal,
    "bar_f1": 80.0}))
EOF
