"""Reads proc.py's lines (one process each) and prints the spread of its windows' CPU per iteration
between processes, the correlation of the reference window with the first measured window, of the
two measured windows with each other, and the spread between the two windows of one process."""
import sys

import numpy as np

for path in sys.argv[1:]:
    a = np.array([[float(t.split("/")[0]) for t in line.split()] for line in open(path)])
    g = np.log(a)
    print(f"{path}: {len(a)} processes, median {np.median(a):.0f} us; sd between processes ref / win1 / win2 "
          f"{g[:, 0].std():.3f} / {g[:, 1].std():.3f} / {g[:, 2].std():.3f}; corr ref-win1 "
          f"{np.corrcoef(g[:, 0], g[:, 1])[0, 1]:.2f}, win1-win2 {np.corrcoef(g[:, 1], g[:, 2])[0, 1]:.2f}; "
          f"sd within a process {(g[:, 1] - g[:, 2]).std() / np.sqrt(2):.3f}")
