"""The report's "## Hierarchy" section of a study: the probes it ran, fitted links, the pyramid.

Bridge in this branch: the section itself lives in ``analysis.hierarchy_section``; the fitted
links are the ``probe/fits.csv`` the study's probe stage wrote beside the raw rows.
"""

from __future__ import annotations

import pandas as pd

from analysis.hierarchy_section import hierarchy_section


def section(study) -> str:
    """Markdown of the section; the pyramid figure goes to ``study.path``."""
    if study.errors.get("probes"):
        raise RuntimeError(f"the probes failed: {study.errors['probes']}")
    fits_path = study.path / "probe" / "fits.csv"
    fits = pd.read_csv(fits_path) if study.probe_raw is not None and fits_path.exists() else None
    return hierarchy_section(study.probe_raw, fits, study.path)
