#!/usr/bin/env bash
# One GPU check a lab runs on a new node (issue 75 item 7), with no network, meant to fit 8 minutes on one GPU. Built
# and tested on CPU (--device cpu); on a GPU still to be measured: no GPU has run it yet.
#
#   bench/gpu_check.sh [--device cuda|cpu] [--out DIR] [--data-dir DIR] [--budget SECONDS]
#
# 1. every method's training step at the papers' shape (random BERT-base from its config), eager, with the host
#    synchronisations per step counted on CUDA (torch.cuda.set_sync_debug_mode("warn"));
# 2. SimCSE's step against sentence-transformers' MNRL on the same weights (bench/train_speed.py --st-model);
# 3. `cse-kit train` on the device, killed with kill -9 after its first checkpoint, then run again: it must say
#    "resuming at step N" with N the checkpoint's step, and finish;
# 4. two `deterministic=true` runs of the same command: their log.jsonl dev curves same or differ;
# 5. gradient caching's table (bench/train_speed.py --grad-cache);
# 6. every method's step again, captured: --pad fixed --compile reduce-overhead (last: compiling takes longest; the
#    methods measured before the budget ran out are kept).
#
# Each part writes into --out as it finishes (its full output in <part>.txt, its JSON, its summary lines in
# summary-parts.txt), so a timeout keeps what finished; summary.txt, printed at the end, gathers them. --budget
# (default 470 s on CUDA, 1200 s on a CPU) bounds the whole: a part gets what is left of it. --device cpu runs the
# same parts on a tiny BERT (2 layers of 32) with few steps, and compiles SimCSE's step only (a CPU captures
# nothing): the code path, in minutes, on a machine without a GPU; its times say nothing of a GPU's. The model it
# trains is built here, random weights saved with the offline all-MiniLM-L6-v2's tokenizer files (bench/gpu_check.py
# model); the data is the kit's data folder (--data-dir, else $CSE_KIT_DATA, else data/), with the Wiki1M sample,
# STS-B dev and SNLI imported (`cse-kit data import`).
set -u

usage() { sed -n '2,/^set -u/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'; }

DEVICE="" OUT="" DATA_DIR="" BUDGET=""
while [ $# -gt 0 ]; do
    case "$1" in
        --device) DEVICE=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        --data-dir) DATA_DIR=$2; shift 2 ;;
        --budget) BUDGET=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "gpu_check.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done

HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}  # PYTHON=... picks another interpreter (a virtual environment's)
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false TQDM_DISABLE=1 PYTHONUNBUFFERED=1
if [ -z "$DEVICE" ]; then
    DEVICE=$("$PY" -c "import torch; print('cuda' if torch.cuda.is_available() else 'cpu')")
fi
case "$DEVICE" in
    cuda) : ;;
    cpu) export CUDA_VISIBLE_DEVICES="" ;;  # Accelerate trains on a visible GPU whatever --device says
    *) echo "gpu_check.sh: --device cuda or cpu, not $DEVICE" >&2; exit 2 ;;
esac
OUT=${OUT:-gpu-check-$DEVICE-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT" || exit 2
OUT=$(cd "$OUT" && pwd)
HEADER="$OUT/summary-node.txt"  # the node, the check and its model
SUMMARY="$OUT/summary-parts.txt"  # a part's lines, as it finishes
: > "$HEADER"
: > "$SUMMARY"
DATA=()
[ -n "$DATA_DIR" ] && DATA=(--data-dir "$DATA_DIR")
CLI='import sys; from cse_kit.cli import main; sys.exit(main(sys.argv[1:]))'

if [ "$DEVICE" = cuda ]; then
    BUDGET=${BUDGET:-470}
    SHAPE=bert-base
    STEPS=(--steps 10 --warmup 3 --dev-pairs 100 --sync-check 3)
    CAPTURED=(--steps 10 --warmup 3 --dev-pairs 8 --sync-check 3)
    CAPTURED_METHODS=simcse,diffcse,scd,esimcse,diffaug,promptbert,consert
    ST=(--batch-size 64 --steps 20 --warmup 3)
    TRAIN=()
    RESUME_STEPS=200 SAVE_STEPS=50 RESUME_EVAL=100 DET_STEPS=100 DET_EVAL=50
    GRAD_CACHE=(--grad-cache 32 --batches 512 --mixed-precision auto)  # the target's batch
else
    BUDGET=${BUDGET:-1200}
    SHAPE=tiny
    STEPS=(--steps 2 --warmup 1 --batch-size 4 --dev-pairs 8 --sync-check 2)
    CAPTURED=(--steps 2 --warmup 1 --batch-size 4 --dev-pairs 8 --sync-check 2)
    CAPTURED_METHODS=simcse  # nothing is captured on a CPU: one method checks the path
    ST=(--batch-size 8 --steps 3 --warmup 1)
    TRAIN=(--set batch_size=8)
    RESUME_STEPS=20 SAVE_STEPS=5 RESUME_EVAL=10 DET_STEPS=10 DET_EVAL=5
    GRAD_CACHE=(--grad-cache 4 --batches 16 --mixed-precision auto)
fi
START=$SECONDS

left() { echo $((BUDGET - (SECONDS - START))); }

note() {  # a summary line: printed now and kept in summary.txt
    echo "$*" | tee -a "$SUMMARY"
}

# part NAME SECONDS command...: the command under `timeout` (its limit, at most what is left of the budget), its
# output in NAME.txt; a failure or a timeout is a summary line. Returns the command's status.
part() {
    local name=$1 limit=$2
    shift 2
    local remaining
    remaining=$(left)
    if [ "$remaining" -le 5 ]; then
        note "$name: not run (the budget of $BUDGET s was spent)"
        return 124
    fi
    [ "$limit" -gt "$remaining" ] && limit=$remaining
    echo "== $name (at most $limit s) ==" >&2
    local t0=$SECONDS rc
    timeout -k 10 "$limit" "$@" > "$OUT/$name.txt" 2>&1
    rc=$?
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
        note "$name: timed out after $limit s (what it finished is in $OUT)"
    elif [ $rc -ne 0 ]; then
        note "$name: FAILED (exit $rc; $OUT/$name.txt ends: $(tail -n 1 "$OUT/$name.txt" | cut -c1-200))"
    fi
    echo "   $name: $((SECONDS - t0)) s" >&2
    return $rc
}

train_command() {  # the `cse-kit train` of parts 3 and 4: run folder, max steps, eval steps, then more --set.
    # It execs Python, so call it in a subshell: `( train_command ... )`, or `train_command ... &` (then $! is
    # Python's process id, the one kill -9 kills)
    local run=$1 steps=$2 eval=$3
    shift 3
    exec "$PY" -c "$CLI" train --preset simcse-bert --profile paper --set "model=$MODEL" --set data=Wiki1M-sample \
        --max-steps "$steps" --set "eval_steps=$eval" --log-with none --no-progress --output-dir "$run" \
        ${DATA[@]+"${DATA[@]}"} ${TRAIN[@]+"${TRAIN[@]}"} "$@"
}

# 0. the node, and the model the runs train
"$PY" "$HERE/gpu_check.py" node "$DEVICE" | tee -a "$HEADER"
echo "gpu check: --device $DEVICE, budget $BUDGET s, results in $OUT" | tee -a "$HEADER"
MODEL="$OUT/model"
MODEL_SHAPE=$([ "$DEVICE" = cuda ] && echo bert-base || echo tiny)
if part model 120 "$PY" "$HERE/gpu_check.py" model "$MODEL" --shape "$MODEL_SHAPE"; then
    grep "^model:" "$OUT/model.txt" | tee -a "$HEADER"
fi

# 1. every method's step, eager, with the host synchronisations counted
part steps-eager 240 "$PY" "$HERE/train_speed.py" --shape "$SHAPE" --device "$DEVICE" --pad fixed "${STEPS[@]}" \
    --output "$OUT/steps-eager.json" ${DATA[@]+"${DATA[@]}"}
[ -f "$OUT/steps-eager.json" ] && "$PY" "$HERE/gpu_check.py" steps "$OUT/steps-eager.json" > "$OUT/steps-summary.txt"

# 2. SimCSE against sentence-transformers' MNRL, same weights
if part st-mnrl 120 "$PY" "$HERE/train_speed.py" --st-model "$MODEL" --device "$DEVICE" "${ST[@]}" \
        --output "$OUT/st-mnrl.json" ${DATA[@]+"${DATA[@]}"}; then
    "$PY" "$HERE/gpu_check.py" st "$OUT/st-mnrl.json" | tee -a "$SUMMARY"
fi

# 3. kill -9 after a checkpoint, then resume; 4. two deterministic runs of one command. Shell functions, run by
# `part` in a bash of their own (so that its timeout ends the training it started too)
resume_check() {
    local run="$OUT/runs/resume" state pid killed_at resumed_at rc steps
    rm -rf "$run" "$OUT/runs/.resume.lock"
    mkdir -p "$OUT/runs"
    state="$run/checkpoint/trainer_state.json"
    train_command "$run" "$RESUME_STEPS" "$RESUME_EVAL" --set "save_steps=$SAVE_STEPS" > "$OUT/resume-killed.txt" 2>&1 &
    pid=$!
    while kill -0 "$pid" 2>/dev/null && [ ! -f "$state" ]; do
        sleep 0.1
    done
    kill -9 "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    if [ ! -f "$state" ]; then
        echo "kill -9 and resume: FAILED (no checkpoint appeared; the run's output ends:" \
            "$(tail -n 1 "$OUT/resume-killed.txt"))"
        return 1
    fi
    if [ -f "$run/summary.json" ]; then
        echo "kill -9 and resume: FAILED (the run finished before the kill: give it more steps)"
        return 1
    fi
    killed_at=$("$PY" -c "import json, sys; print(json.load(open(sys.argv[1]))['step'])" "$state")
    echo "killed (kill -9) with the checkpoint of step $killed_at on disk"
    (train_command "$run" "$RESUME_STEPS" "$RESUME_EVAL" --set "save_steps=$SAVE_STEPS" \
        > "$OUT/resume-resumed.txt" 2>&1)
    rc=$?
    resumed_at=$(sed -n 's/.*resuming at step \([0-9]*\).*/\1/p' "$OUT/resume-resumed.txt" | head -n 1)
    echo "the same command again: exit $rc${resumed_at:+, resuming at step $resumed_at}"
    if [ $rc -ne 0 ] || [ "$resumed_at" != "$killed_at" ] || [ ! -f "$run/summary.json" ]; then
        echo "kill -9 and resume: FAILED (killed at step $killed_at, resumed at ${resumed_at:-no step}, exit $rc)"
        return 1
    fi
    steps=$("$PY" -c "import json, sys; print(json.load(open(sys.argv[1]))['steps'])" "$run/summary.json")
    echo "kill -9 and resume: killed after the checkpoint of step $killed_at," \
        "\"resuming at step $resumed_at\", finished at step $steps: ok"
}

deterministic_runs() {
    local run
    for run in a b; do
        rm -rf "$OUT/runs/deterministic-$run"
        (CUBLAS_WORKSPACE_CONFIG=:4096:8 train_command "$OUT/runs/deterministic-$run" "$DET_STEPS" "$DET_EVAL" \
            --set deterministic=true) || return $?
    done
    "$PY" "$HERE/gpu_check.py" same "$OUT/runs/deterministic-a" "$OUT/runs/deterministic-b"
    return 0
}

export -f resume_check deterministic_runs train_command
export OUT MODEL PY CLI HERE RESUME_STEPS SAVE_STEPS RESUME_EVAL DET_STEPS DET_EVAL
ARRAYS=$(declare -p DATA TRAIN)
part resume 240 bash -c "$ARRAYS; resume_check"
grep "^kill -9 and resume:" "$OUT/resume.txt" | tee -a "$SUMMARY" || true
if part deterministic 240 bash -c "$ARRAYS; deterministic_runs"; then
    grep "^deterministic runs:" "$OUT/deterministic.txt" | tee -a "$SUMMARY"
fi

# 5. gradient caching's table
if part grad-cache 150 "$PY" "$HERE/train_speed.py" "${GRAD_CACHE[@]}" --shape "$SHAPE" --device "$DEVICE" \
        --methods simcse --output "$OUT/grad-cache.json" ${DATA[@]+"${DATA[@]}"}; then
    "$PY" "$HERE/gpu_check.py" grad-cache "$OUT/grad-cache.json" | tee -a "$SUMMARY"
fi

# 6. every method's step, captured (eager re-timed beside it)
part steps-captured 600 "$PY" "$HERE/train_speed.py" --shape "$SHAPE" --device "$DEVICE" --pad fixed \
    --compile reduce-overhead --methods "$CAPTURED_METHODS" "${CAPTURED[@]}" --output "$OUT/steps-captured.json" \
    ${DATA[@]+"${DATA[@]}"}
if [ -f "$OUT/steps-eager.json" ]; then
    "$PY" "$HERE/gpu_check.py" steps "$OUT/steps-eager.json" "$OUT/steps-captured.json" > "$OUT/steps-summary.txt"
fi

echo "total: $((SECONDS - START)) s of the budget's $BUDGET" >> "$SUMMARY"
cat "$HEADER" ${OUT:+"$OUT/steps-summary.txt"} "$SUMMARY" > "$OUT/summary.txt" 2>/dev/null
echo
echo "== gpu check summary ($DEVICE; everything in $OUT) =="
cat "$OUT/summary.txt"
