"""The study's "Hierarchy" section: the probes it ran, fitted links, the pyramid, a placement example."""

from analysis.hierarchy_section import hierarchy_section


def section(ctx) -> str:
    if getattr(ctx, "errors", {}).get("probes"):
        raise RuntimeError(f"the probes failed: {ctx.errors['probes']}")
    return hierarchy_section(ctx.probe_raw, ctx.probe_fits, ctx.out_dir)
