#!/bin/bash
# The runs behind rows.csv and steps.csv (2026-12-06, AMD EPYC 25/17/1, nothing else running): two of the
# quick study's configurations, interleaved, with 6 s windows instead of the quick sweep's 1 s, so that
# each run's own last 4 s say where its first second should have been. From the repository root.
#   C1: the designed sample's bf16 CNN 64/16 from RAM, one worker, prefetch 4, double-buffered
#   C2: the grid's fp32 MLP 64/32 from ArrayRecord, two workers, prefetch 4, feed none
# "growth rule": runs 1-6 at 39b0c00 (warm-up waited only for the batches to stop growing older),
# 06:31-06:34 UTC; "drain rule": runs 1-4 with the drain check (experiments/train.py, _filled),
# 06:35-06:37 UTC. `table.py` replays both rules on every run's steps and prints the table.
T=".venv/bin/python -m experiments train --grain_stats=False --results_root=${ROOT:-/tmp/drain}"
C1="--model=cnn --width=16 --depth=3 --precision=bf16 --grad_accum_steps=1 --source=ram --image_size=16 --batch_size=64 --augment_cost=2 --num_workers=1 --prefetch_buffer_size=4 --feed=double_buffer --resident_min_measure_s=0.5 --min_steps=5 --max_warmup_s=1"
C2="--model=mlp --width=512 --depth=2 --precision=fp32 --grad_accum_steps=1 --source=arrayrecord --image_size=32 --batch_size=64 --augment_cost=2 --num_workers=2 --prefetch_buffer_size=4 --feed=none --resident_min_measure_s=0.5 --min_steps=5 --max_warmup_s=1"
set -e
for i in ${RUNS:-1 2 3 4 5 6}; do
  for c in C1 C2; do
    $T ${!c} --min_measure_s=6 --run_id=${c}_$i 2>&1 | grep -o 'rows: .*'
  done
done
