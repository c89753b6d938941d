"""Child-process entry used by sweeps: ``python -m experiments.runone DIR``.

Reads DIR/config.json (a TrainConfig), runs it, writes DIR/row.json, steps.csv and grain_stats.csv,
or DIR/error.json with the error text. It dies with its parent (PR_SET_PDEATHSIG).
"""

import json
import sys
import traceback
from pathlib import Path


def _jsonable(o):
    return o.item() if hasattr(o, "item") else str(o)


def main(argv=None) -> int:
    from experiments.loader import die_with_parent
    die_with_parent()
    d = Path((argv or sys.argv[1:])[0])
    from experiments import train
    try:
        cfg = train.TrainConfig(**json.loads((d / "config.json").read_text()))
        res = train.run_detailed(cfg)
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # noqa: BLE001 — becomes a failed row in the sweep
        (d / "error.json").write_text(json.dumps({"error": f"{type(e).__name__}: {e}",
                                                  "traceback": traceback.format_exc()}))
        return 1
    (d / "row.json").write_text(json.dumps(res.row.iloc[0].to_dict(), default=_jsonable))
    res.steps.to_csv(d / "steps.csv", index=False)
    res.grain_stats.to_csv(d / "grain_stats.csv", index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
