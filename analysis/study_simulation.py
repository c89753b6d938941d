"""The study's "Simulation" section: memsim's simulated sweep over the knobs the study measured."""

from analysis.simulation_section import simulation_section


def section(ctx) -> str:
    rows = ctx.rows
    ok = rows[rows.status == "ok"] if len(rows) and "status" in rows else rows
    return simulation_section(ok, ctx.out_dir)
