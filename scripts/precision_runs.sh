#!/usr/bin/env bash
# The precision-report runs behind docs/precision.md, resumable and parallel.
#
#   scripts/precision_runs.sh [--jobs N] [--group K] [--verify PATH] [--runs DIR] STUDY...
#                                                     run (or resume) the studies
#   scripts/precision_runs.sh --publish STUDY...                                 write docs/precision/STUDY.*
#   scripts/precision_runs.sh --list                                              the studies and their options
#
# Every run keeps its figures per seed and policy in DIR/STUDY/checkpoint (precision-report
# --checkpoint): a run that is killed, started again with the same study, goes on where it stopped,
# and --publish reads every figure from there (it runs nothing that is already done). A unit of work
# is one seed of a study and K of its policies (--group K, default all: the exact policy runs once per
# unit, so larger units cost less, smaller ones lose less when killed); the long-context study's
# units come first when several run at once (they are the longest). --jobs N runs N units at once, each with OMP_NUM_THREADS
# threads. On this repository's 2-core machines run it under `nice -n 19` with --jobs 1; a 16-core
# machine takes --jobs 8 --group 4 with OMP_NUM_THREADS=2.
# DIR defaults to build/precision-runs; the dsv4-verify used defaults to build/release's.
set -euo pipefail
cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"  # also for a copy of this script in build/

runs=build/precision-runs
verify=build/release/verify/cli/dsv4-verify
jobs=1
group=0
publish=0

FLASH_4096="--synth flash --ratio 4 --prefill 4096 --chunk 512"
# The activation models with outliers (docs/precision.md section 4). Heavy q/k dims are where the
# indexer's rotation matters, so official's FP4 and FP8 are run with and without it; heavy x channels
# and heavy-tailed rows: the rotation does not act on them (tiny dims, section 4), so the indexer
# formats and bf16 only (defined, not run at Flash dims: section 4).
QK_OUTLIERS="--qk-heavy-channels 4 --qk-heavy-scale 10"
X_OUTLIERS="--x-heavy-channels 4 --x-heavy-scale 100 --x-tail-dof 4"

# study -> "first seed, seed count, policies, options"
study_seed() { echo 1; }
study_seeds() {
  case $1 in
    flash-csa-p4096-seeds) echo 5 ;;
    flash-csa-p4096-qk-outliers|flash-csa-p4096-x-outliers) echo 3 ;;
    flash-csa-p16384) echo 1 ;;
  esac
}
study_policies() {
  case $1 in
    # The main policies and the one-switch ones (each changes one thing of official).
    flash-csa-p4096-seeds) echo official,fp8-indexer,nvfp4-indexer,fp32-probs,bf16,fp32-indexer-scores,fp8-indexer-keys-only,fp4-indexer-keys-only ;;
    # The rotation's worth to FP4 (official) and to FP8, each with and without it. NVFP4 with and without
    # the rotation, fp32-probs and bf16 are not run at Flash dims (a 4096-token unit of one seed and one
    # policy costs about 2 CPU minutes alone, 4 to 6 with the exact reference on this repository's
    # 2-core machines, and no time was left for them): the tiny-dims seeds answer for them
    # (docs/precision.md section 4).
    flash-csa-p4096-qk-outliers) echo official,fp4-indexer-no-hadamard,fp8-indexer,fp8-indexer-no-hadamard ;;
    flash-csa-p4096-x-outliers) echo official,fp8-indexer,nvfp4-indexer,bf16 ;;
    flash-csa-p16384) echo official,fp8-indexer,nvfp4-indexer,fp32-probs,bf16 ;;
  esac
}
study_options() {
  case $1 in
    flash-csa-p4096-seeds) echo "$FLASH_4096" ;;
    flash-csa-p4096-qk-outliers) echo "$FLASH_4096 $QK_OUTLIERS" ;;
    flash-csa-p4096-x-outliers) echo "$FLASH_4096 $X_OUTLIERS" ;;
    flash-csa-p16384) echo "--synth flash --ratio 4 --prefill 16384 --chunk 512 --max-seq-len 16384" ;;
  esac
}
STUDIES=(flash-csa-p4096-seeds flash-csa-p16384 flash-csa-p4096-qk-outliers flash-csa-p4096-x-outliers)

usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }

selected=()
while [ $# -gt 0 ]; do
  case $1 in
    --jobs) jobs=$2; shift 2 ;;
    --group) group=$2; shift 2 ;;
    --verify) verify=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --publish) publish=1; shift ;;
    --list)
      for s in "${STUDIES[@]}"; do
        echo "$s: seeds $(study_seed "$s")..+$(study_seeds "$s"); $(study_options "$s"); policies $(study_policies "$s")"
      done
      exit 0 ;;
    -h|--help) usage ;;
    -*) echo "precision_runs: unknown option $1" >&2; usage ;;
    *) selected+=("$1"); shift ;;
  esac
done
[ ${#selected[@]} -gt 0 ] || usage
for s in "${selected[@]}"; do
  [ -n "$(study_seeds "$s")" ] || { echo "precision_runs: unknown study '$s' (--list names them)" >&2; exit 2; }
done
[ -x "$verify" ] || { echo "precision_runs: no dsv4-verify at $verify (build it, or pass --verify)" >&2; exit 2; }

# One unit of work: STUDY SEED [POLICIES]; its log in DIR/STUDY/logs.
run_unit() {
  local study=$1 seed=$2 policies=${3:-$(study_policies "$1")}
  local dir=$runs/$study
  mkdir -p "$dir/logs" "$dir/units"
  local tag=seed-$seed-$(echo "$policies" | tr ',' '+' | cut -c1-60)
  # shellcheck disable=SC2046
  "$verify" precision-report $(study_options "$study") --seed "$seed" --seeds 1 --policies "$policies" \
    --checkpoint "$dir/checkpoint" --json "$dir/units/$tag.json" --progress >"$dir/logs/$tag.log" 2>&1 \
    && echo "precision_runs: $study $tag done" \
    || { echo "precision_runs: $study $tag failed, see $dir/logs/$tag.log" >&2; return 1; }
}
export -f run_unit study_options study_policies
export runs verify FLASH_4096 QK_OUTLIERS X_OUTLIERS

if [ $publish = 1 ]; then
  for study in "${selected[@]}"; do
    out=docs/precision/$study
    # shellcheck disable=SC2046
    "$verify" precision-report $(study_options "$study") --seed "$(study_seed "$study")" \
      --seeds "$(study_seeds "$study")" --policies "$(study_policies "$study")" \
      --checkpoint "$runs/$study/checkpoint" --json "$out.json" --markdown "$out.md" --plots "$out"
  done
  exit 0
fi

# Units: "STUDY SEED POLICIES", in the order of the command line; with --jobs > 1 the long-context
# study's first, so that its long units start early.
order=("${selected[@]}")
if [ "$jobs" -gt 1 ] && [[ " ${selected[*]} " == *" flash-csa-p16384 "* ]]; then
  order=(flash-csa-p16384)
  for s in "${selected[@]}"; do [ "$s" = flash-csa-p16384 ] || order+=("$s"); done
fi
units=()
for study in "${order[@]}"; do
  IFS=',' read -r -a policies <<<"$(study_policies "$study")"
  size=${group}
  [ "$size" -gt 0 ] || size=${#policies[@]}
  first=$(study_seed "$study")
  for ((i = 0; i < $(study_seeds "$study"); i++)); do
    for ((p = 0; p < ${#policies[@]}; p += size)); do
      chunk=$(IFS=','; echo "${policies[*]:p:size}")
      units+=("$study $((first + i)) $chunk")
    done
  done
done
printf '%s\n' "${units[@]}" | xargs -P "$jobs" -I{} bash -c 'run_unit {}'
