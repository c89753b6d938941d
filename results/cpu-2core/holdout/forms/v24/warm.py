"""The step probe alone (the quick study's 40 shapes, three rounds, no stage or loader probe) into the
folder given, its later rounds warmed up for at least MEMSIM_EXP_WARM seconds with
``probe-warm-floor.diff`` applied (unset: two steps, as committed). From the repository root:

    .venv/bin/python results/cpu-2core/holdout/forms/v24/warm.py /tmp/warm/A1
    MEMSIM_EXP_WARM=0.03 .venv/bin/python results/cpu-2core/holdout/forms/v24/warm.py /tmp/warm/B1
"""
import sys, os, dataclasses
sys.path.insert(0, os.getcwd())


def main():
    from experiments import components, sweep
    cfg = components.for_sweep(sweep.quick())
    cfg = dataclasses.replace(cfg, stage=False, loader=False, loader_sample=0)
    r = components.run(cfg, sys.argv[1], progress=False)
    print(sys.argv[1], r["failed"], round(r["seconds"], 1))


if __name__ == "__main__":
    main()
