"""Refits every committed cost model and rewrites each pair's checks after a model version change,
with the commands this README gives for them (stdout of each, as ``> FILE`` writes it). A pair's
``cv.txt`` is rewritten only where the pair has one. From the repository root:

    .venv/bin/python results/cpu-2core/holdout/refit.py            # every pair and committed model
    .venv/bin/python results/cpu-2core/holdout/refit.py pair140    # the pairs named
"""
import contextlib, glob, io, os, sys, warnings
sys.path.insert(0, ".")
from concurrent.futures import ProcessPoolExecutor
H = "results/cpu-2core/holdout/"
#: the committed models outside the pairs: (model file, results folder it is fitted on)
OTHERS = [(H + "model.json", "results/cpu-2core/study"),
          ("results/cpu-2core/study-components/costmodel.json", "results/cpu-2core/study-components"),
          ("results/nvidia-h100/model.json", "results/nvidia-h100/study"),
          ("results/nvidia-h100/remeasured/model.json", "results/nvidia-h100/remeasured/study"),
          ("results/nvidia-h200/model.json", "results/nvidia-h200/study")]


def run(argv, out=None):
    from analysis.__main__ import main
    buf = io.StringIO()
    with warnings.catch_warnings(), contextlib.redirect_stdout(buf):
        warnings.simplefilter("ignore")
        rc = main(argv)
    if rc != 0:
        raise SystemExit(f"{' '.join(argv)}: exit {rc}")
    if out:
        with open(out, "w") as f:
            f.write(buf.getvalue())


def pair(d):
    """A pair folder (``study/``, ``second/``) or the holdout folder itself (the committed study)."""
    study = d + "study" if d != H else "results/cpu-2core/study"
    m = d + "model.json"
    run(["costmodel", "fit", study, "--out", m])
    run(["costmodel", "compare", m, d + "second", "--json"], d + "compare.txt")
    run(["costmodel", "compare", m, d + "second", "--step", "measured", "--json"], d + "compare_step_measured.txt")
    if os.path.exists(d + "cv.txt"):
        run(["costmodel", "cv", study, "--json"], d + "cv.txt")
    if os.path.exists(d + "cv_kept.txt"):
        run(["costmodel", "cv", study, "--keep_probes", "--json"], d + "cv_kept.txt")
    return d


def other(i):
    m, src = OTHERS[i]
    run(["costmodel", "fit", src, "--out", m])
    return m


if __name__ == "__main__":
    names = sys.argv[1:] or sorted((os.path.basename(os.path.dirname(p)) for p in glob.glob(H + "pair*/model.json")),
                                   key=lambda s: int(s[4:]))
    dirs = [H + n + "/" for n in names] + ([H] if not sys.argv[1:] else [])
    with ProcessPoolExecutor(2) as ex:
        for d in ex.map(pair, dirs):
            print(d, flush=True)
        if not sys.argv[1:]:
            for m in ex.map(other, range(len(OTHERS))):
                print(m, flush=True)
