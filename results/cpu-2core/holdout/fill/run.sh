#!/bin/bash
# The designs behind rows.csv (2026-12-03, 14:08-14:30 UTC, Intel Xeon 6/207/2, nothing else running;
# each arm's runs interleaved in the order given). From the repository root. Every run:
T=".venv/bin/python -m experiments train --grain_stats=False"
AR="--model=cnn --width=16 --depth=3 --precision=bf16 --grad_accum_steps=2 --source=arrayrecord --image_size=32 \
    --batch_size=128 --augment_cost=4 --num_workers=1 --resident_min_measure_s=0.5"
CNN="--model=cnn --width=16 --depth=3 --precision=fp32 --grad_accum_steps=1 --source=memmap --image_size=32 \
     --batch_size=128 --augment_cost=4 --num_workers=2 --resident_min_measure_s=0.5 --feed=none \
     --prefetch_buffer_size=4 --min_measure_s=1 --min_steps=5"
# set "window": X1 X2 X3 X3 X2 X1 (before the fill rule)
#   X1: $T $AR --max_warmup_s=1 --feed=grain_device_put --prefetch_buffer_size=1 --min_measure_s=6
#   X2: $T $AR --max_warmup_s=1 --feed=none --prefetch_buffer_size=4 --min_measure_s=6
#   X3: $T $AR --max_warmup_s=1 --feed=grain_device_put --prefetch_buffer_size=1 --min_measure_s=1
# set "warmup_ar": W1 W4 W4 W1 (before the fill rule)
#   W1: $T $AR --feed=grain_device_put --prefetch_buffer_size=1 --min_measure_s=1 --max_warmup_s=1
#   W4: $T $AR --feed=grain_device_put --prefetch_buffer_size=1 --min_measure_s=1 --warmup_time_s=4
# set "warmup_cnn": W1 W4 W4 W1 W1 W4 (before the fill rule)
#   W1: $T $CNN --max_warmup_s=1        W4: $T $CNN --warmup_time_s=4
# set "rule": W1 W1 (with the fill rule): $T $CNN --max_warmup_s=1; the first run's steps are rule_steps.csv
# set "step_kind": cnn32 mlp32 mlpbf2 cnnbf2 cnnbf2 mlpbf2 mlp32 cnn32 (before the fill rule), each
#   $T <step> --source=memmap --image_size=32 --batch_size=128 --augment_cost=4 --num_workers=1 \
#      --prefetch_buffer_size=4 --feed=none --max_warmup_s=1 --min_measure_s=6 --resident_min_measure_s=2
#   with <step>: cnn32  --model=cnn --width=16 --depth=3 --precision=fp32 --grad_accum_steps=1
#                mlp32  --model=mlp --width=512 --depth=2 --precision=fp32 --grad_accum_steps=1
#                mlpbf2 --model=mlp --width=512 --depth=2 --precision=bf16 --grad_accum_steps=2
#                cnnbf2 --model=cnn --width=16 --depth=3 --precision=bf16 --grad_accum_steps=2
set -e
case "${1:-}" in
  rule) for i in 1 2; do $T $CNN --max_warmup_s=1 | grep -o 'rows: .*'; done ;;
  *) echo "usage: bash results/cpu-2core/holdout/fill/run.sh rule   (the other sets: the commands above)"; exit 2 ;;
esac
