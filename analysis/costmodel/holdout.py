"""Held-out pairs: the cost model's two checks, on every pair of measurements at once.

A *held-out pair* is a folder with ``study/`` (a quick study: ``python -m experiments study --preset
quick``) and ``second/`` (a second, independent sweep measured after it on the same machine: another
process, another order, a grid the study did not contain). For each pair, :func:`evaluate_pair` runs
the two checks of the model's goal (issue 12 of the project), exactly as the command line does them:

- ``python -m analysis costmodel cv PAIR/study``: 5-fold cross-validation of the study, each held-out
  configuration's step from the step model with its own shape held out of the step probe;
- ``python -m analysis costmodel fit PAIR/study`` then ``compare MODEL.json PAIR/second``: the
  model fitted on the whole study predicting every configuration of the second sweep.

``python -m analysis costmodel holdout results/cpu-2core/holdout`` runs them over every pair folder
there, in worker processes, and prints one line per pair, which pairs meet the goal (median |rel
error| ≤ 5%, max ≤ 15%, Kendall τ ≥ 0.8, for each check), and the medians over the pairs. Beside
the two checks it runs ``cv PAIR/study --keep_probes`` (the held-out configurations' own shapes
kept in the probes, as for a configuration the study did not run inside its levels:
``analysis.costmodel.evaluate.cross_validate``). Why this
is a command and not a loop in a notebook: the holdout README's tables compare model versions over
thirty pairs, and a reader must be able to rebuild each row of them from the committed folders.
Beside each check it prints how tight the measurements were (the median width of the measured
intervals, and for the second sweep how far identical stamped work drifted between a
configuration's repeats): an error can only be judged against measurements tighter than it.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.costmodel.features import CostModelError

#: the goal each check is held to: median |rel error|, max |rel error|, Kendall's τ
GOAL = {"median_abs_rel_error": 0.05, "max_abs_rel_error": 0.15, "kendall_tau": 0.8}
#: each check's key in a pair's result and its columns' prefix in the table: the cross-validation, the
#: same with the held-out configurations' own shapes kept in the probes, and the comparison
CHECKS = (("cv", "cv"), ("cv_kept", "cvk"), ("compare", "cmp"))
#: the summary keys carried into a pair's row, per check
KEYS = ("median_abs_rel_error", "max_abs_rel_error", "kendall_tau", "n", "median_interval_width",
        "median_work_spread")


def _natural(name: str) -> list:
    """Sort key: ``pair9`` before ``pair10``."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def is_pair(folder: Path) -> bool:
    return (folder / "study" / "rows.csv").is_file() and (folder / "second" / "rows.csv").is_file()


def find_pairs(folders: list[str], explicit: list[tuple[str, str]] | None = None) -> list[tuple[str, str, str]]:
    """(name, study folder, second folder) for each pair: a folder given that holds ``study/`` and
    ``second/``, or each such folder directly inside a folder given (in natural order); ``explicit``
    adds (study, second) pairs laid out otherwise, named by the study's folder. CostModelError, before
    any work, for a folder that is neither, a missing rows.csv, or a name given twice."""
    out = []
    for f in folders:
        d = Path(f)
        if not d.is_dir():
            raise CostModelError(f"holdout: {f!r} is not a folder; give a pair folder (study/ and second/, each "
                                 f"with rows.csv) or a folder of them")
        if is_pair(d):
            out.append((d.name, str(d / "study"), str(d / "second")))
            continue
        inside = sorted((c for c in d.iterdir() if c.is_dir() and is_pair(c)), key=lambda c: _natural(c.name))
        if not inside:
            raise CostModelError(f"holdout: {f!r} holds no pair: a pair folder has study/rows.csv and "
                                 f"second/rows.csv (a quick study and a second sweep after it)")
        out += [(c.name, str(c / "study"), str(c / "second")) for c in inside]
    for study, second in explicit or []:
        for what, p in (("study", study), ("second sweep", second)):
            if not (Path(p) / "rows.csv").is_file():
                raise CostModelError(f"holdout --pair: the {what} folder {p!r} has no rows.csv")
        out.append((str(Path(study)), study, second))
    if not out:
        raise CostModelError("holdout: no pairs given; give pair folders, a folder of them, or --pair STUDY SECOND")
    names = [n for n, _, _ in out]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise CostModelError(f"holdout: pair name(s) given twice: {', '.join(twice)}")
    return out


def meets(s: dict, goal: dict = GOAL) -> bool:
    """Whether one check's summary meets the goal (a τ that is NaN does not).

    >>> meets({"median_abs_rel_error": 0.04, "max_abs_rel_error": 0.15, "kendall_tau": 0.8})
    True
    >>> meets({"median_abs_rel_error": 0.04, "max_abs_rel_error": 0.151, "kendall_tau": 0.9})
    False
    """
    return bool(s["median_abs_rel_error"] <= goal["median_abs_rel_error"]
                and s["max_abs_rel_error"] <= goal["max_abs_rel_error"]
                and s["kendall_tau"] >= goal["kendall_tau"])


def evaluate_pair(name: str, study: str, second: str) -> dict:
    """Both checks of one pair: the summaries of ``costmodel cv STUDY`` and of ``costmodel compare``
    (the model fitted on STUDY, predicting SECOND), as those commands compute them, and of
    ``costmodel cv STUDY --keep_probes``."""
    from analysis.costmodel.cli import read_dir
    from analysis.costmodel.evaluate import cross_validate, other_platform, predicted_vs_measured, summary
    from analysis.costmodel.model import fit, measured_configs
    d = read_dir(study)

    def cv(hold_out_probes: bool) -> dict:
        return summary(cross_validate(d["rows"], probes=d["probes"], steps=d["steps"], step_probe=d["step_probe"],
                                      stage_probe=d["stage_probe"], worker_probe=d["worker_probe"],
                                      hold_out_probes=hold_out_probes))

    model = fit(d["rows"], d["probes"], d["steps"], d["step_probe"], sources=[study], stage_probe=d["stage_probe"],
                worker_probe=d["worker_probe"])
    s2 = read_dir(second)
    meas = measured_configs(s2["rows"])
    other_platform(model, meas, None)
    cmp = summary(predicted_vs_measured(model, s2["rows"], meas))
    env = model.environment
    return {"pair": name, "cpu_model": env.get("cpu_model", ""), "git_commit": env.get("git_commit", "")[:7],
            "cv": cv(True), "cv_kept": cv(False), "compare": cmp}


def _row(res: dict, goal: dict) -> dict:
    row = {"pair": res["pair"], "cpu_model": res["cpu_model"], "git_commit": res["git_commit"]}
    for check, short in CHECKS:
        s = res[check]
        for k in KEYS:
            row[f"{short}_{k}"] = s.get(k, math.nan)
        row[f"{short}_meets"] = meets(s, goal)
    row["both_meet"] = row["cv_meets"] and row["cmp_meets"]
    return row


def holdout(pairs: list[tuple[str, str, str]], jobs: int = 1, goal: dict = GOAL, progress: bool = False) -> pd.DataFrame:
    """One row per pair (in the order given): each check's median and max |rel error|, Kendall's τ,
    n, the measurements' median interval width (and the second sweep's work spread), whether it
    meets ``goal``, and ``both_meet``. ``jobs`` worker processes (spawned: each pair is fitted apart,
    so the rows do not depend on ``jobs``); a pair that cannot be evaluated raises CostModelError
    naming it, and the rest are not waited for."""
    if not isinstance(jobs, int) or jobs < 1:
        raise CostModelError(f"holdout: jobs={jobs!r}; give a positive number of worker processes")
    from analysis.interrupt import check
    with _progress(progress, len(pairs)) as bar:
        results = []
        if jobs == 1 or len(pairs) == 1:
            for p in pairs:
                results.append(_evaluate(p))
                check()
                bar.update()
        else:
            import multiprocessing
            # spawned workers that ignore Ctrl-C: the interrupt is the parent's to act on, and leaving
            # the pool's block terminates them (Pool.__exit__), whatever they were doing
            with multiprocessing.get_context("spawn").Pool(min(jobs, len(pairs)), initializer=_ignore_sigint) as pool:
                it = pool.imap(_evaluate, pairs)
                while len(results) < len(pairs):
                    check()
                    try:
                        results.append(it.next(timeout=0.2))
                    except multiprocessing.TimeoutError:
                        continue
                    bar.update()
    return pd.DataFrame([_row(r, goal) for r in results])


def _ignore_sigint() -> None:
    import signal
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _evaluate(pair: tuple[str, str, str]) -> dict:
    """:func:`evaluate_pair`, with the pair named in its error."""
    try:
        return evaluate_pair(*pair)
    except CostModelError as e:
        raise CostModelError(f"pair {pair[0]}: {e}") from None


def _progress(on: bool, total: int):
    from tqdm import tqdm
    return tqdm(desc="pairs", unit="pair", total=total, leave=False, disable=None if on else True)


def medians(table: pd.DataFrame) -> dict:
    """The medians over the pairs of each check's median and max |rel error| and τ, and how many pairs
    meet the goal in each check and in both."""
    out = {"n_pairs": int(len(table))}
    for check, short in CHECKS:
        out[f"median_{check}"] = {k: float(np.nanmedian(table[f"{short}_{k}"].to_numpy(float)))
                                  for k in ("median_abs_rel_error", "max_abs_rel_error", "kendall_tau")}
        out[f"n_meeting_{check}"] = int(table[f"{short}_meets"].sum())
    out["n_meeting_both"] = int(table.both_meet.sum())
    out["pairs_meeting_both"] = table.pair[table.both_meet].tolist()
    kept_both = table.cvk_meets & table.cmp_meets
    out["n_meeting_both_kept"] = int(kept_both.sum())
    out["pairs_meeting_both_kept"] = table.pair[kept_both].tolist()
    return out


def format_table(table: pd.DataFrame) -> str:
    """The table as the command prints it: percentages, τ to two places, ``yes`` where a check meets
    the goal."""
    def cpu(text):  # "Intel(R) Xeon(R) Processor (family/model/stepping 6/207/2)" -> "Intel Xeon (6/207/2)"
        text = re.sub(r"\(R\)|\(TM\)|\bProcessor\b|\bCPU\b|family/model/stepping ", "", str(text))
        return " ".join(text.split())

    def pct(v):
        return "" if not np.isfinite(v) else f"{100 * v:.1f}"

    lines = []
    for _, r in table.iterrows():
        cells = [r.pair, cpu(r.cpu_model) or "(not recorded)", r.git_commit]
        for s in ("cv", "cmp"):
            cells += [pct(r[f"{s}_median_abs_rel_error"]), pct(r[f"{s}_max_abs_rel_error"]),
                      f"{r[f'{s}_kendall_tau']:.2f}", pct(r[f"{s}_median_interval_width"]),
                      "yes" if r[f"{s}_meets"] else ""]
        cells += [pct(r["cmp_median_work_spread"]), "yes" if r.both_meet else ""]
        cells += [pct(r["cvk_median_abs_rel_error"]), pct(r["cvk_max_abs_rel_error"]), f"{r['cvk_kendall_tau']:.2f}",
                  "yes" if r.cvk_meets else ""]
        lines.append(cells)
    head = ["pair", "cpu", "commit", "cv med%", "cv max%", "cv tau", "cv width%", "cv meets",
            "cmp med%", "cmp max%", "cmp tau", "cmp width%", "cmp meets", "cmp spread%", "both",
            "kept cv med%", "kept cv max%", "kept cv tau", "kept cv meets"]
    return pd.DataFrame(lines, columns=head).to_string(index=False)
