#!/usr/bin/env bash
# Two studies on one lent GPU, in one command from the repository root:
#   bash benchmarks/device_study.sh     (STEPS, EVERY, SEEDS, ABLATE_S, SUITE_S to change them)
# 1. MLM against RTD at equal FLOPs (the main job's tiny model at STEPS MLM steps), SEEDS
#    seeds an arm, all runs at once on the one GPU, the suite's frozen tasks and probes
#    scored on each checkpoint by the loop (config.evals);
# 2. pretrained against random initialisation at STEPS: the MLM runs' last checkpoints and
#    SEEDS random inits of the same architecture, each through the suite (fine-tuned topic
#    and arg_mentions, frozen STS and retrieval, probes).
# Everything but the checkpoints comes back as $OUT/study.tgz (analysis: benchmarks/study_tables.py).
set -uo pipefail
source benchmarks/device_env.sh
STEPS=${STEPS:-6000}; EVERY=${EVERY:-1000}; SEEDS=${SEEDS:-3}
S=${STUDY:-/tmp/study}
export XLA_PYTHON_CLIENT_PREALLOCATE=false   # several runs share the GPU
TASKS=sts_relatedness+api_retrieval+topic+arg_mentions
ONLY=sts_relatedness,api_retrieval,topic,arg_mentions
t0=$(date +%s)
timeout "${ABLATE_S:-330}" python3 -m encoder ablate \
    --config=experiments/pretrain.py:evals=$TASKS --sweep=objective=mlm,rtd --seeds="$SEEDS" \
    --equal_flops --parallel=$((2 * SEEDS)) --workdir="$S/mlm_rtd" \
    --config.train.num_steps="$STEPS" --config.train.checkpoint_every="$EVERY" \
    --config.train.eval_every="$EVERY" --config.train.log_every="$EVERY" \
    --config.train.warmup_steps="${WARMUP:-100}" \
    > "$OUT/ablate.log" 2>&1
echo "ablate: exit $? after $(( $(date +%s) - t0 )) s" | tee -a "$OUT/times.txt"
t1=$(date +%s)
for s in $(seq 0 $((SEEDS - 1))); do
    timeout "${SUITE_S:-240}" python3 -m encoder suite --init_from="$S/mlm_rtd/runs/objective=mlm__seed$s" \
        --probe --only=$ONLY --learning_rates=1e-3 --max_eval=0 --seeds=1 \
        --workdir="$S/pays/pretrained_seed$s" > "$OUT/suite_pre$s.log" 2>&1 &
done
timeout "${SUITE_S:-240}" python3 -m encoder suite --init_from="$S/mlm_rtd/runs/objective=mlm__seed0" \
    --random_init --probe --only=$ONLY --learning_rates=1e-3 --max_eval=0 --seeds="$SEEDS" \
    --workdir="$S/pays/random" > "$OUT/suite_random.log" 2>&1 &
wait
echo "suites: $(( $(date +%s) - t1 )) s" | tee -a "$OUT/times.txt"
tar czf "$OUT/study.tgz" --exclude='checkpoints' --exclude='best' --exclude='data' --exclude='tasks' \
    --exclude='*.array_record*' --exclude='*.png' -C "$(dirname "$S")" "$(basename "$S")"
ls -la "$OUT"
