#!/bin/bash
# The design behind rows.csv (2026-12-03, 13:53-14:06 UTC, Intel Xeon 6/207/2, nothing else running):
# one loader (memmap 32x32, four augmentation passes, batch 128, one worker) in front of CNN steps of
# growing length (width 16 to 256), each width twice, in the order 16 ... 256 256 ... 16.
# From the repository root: bash results/cpu-2core/holdout/wait/run.sh; then
# .venv/bin/python results/cpu-2core/holdout/wait/table.py
set -e
for w in 16 32 64 128 256 256 128 64 32 16; do
  .venv/bin/python -m experiments train --model=cnn --width=$w --depth=3 --precision=fp32 --source=memmap \
    --image_size=32 --batch_size=128 --augment_cost=4 --num_workers=1 --prefetch_buffer_size=4 --feed=none \
    --grain_stats=False --max_warmup_s=1 --min_measure_s=6 --resident_min_measure_s=2 | grep -o 'rows: .*'
done
