"""The knobs shared by measurement (``experiments``), simulation (``memsim``) and ``analysis``.

Rows join on these names, so they are written once, here: the levels of each categorical knob (as
``Literal`` types, which the config dataclasses use for validation, and as tuples), the knob names
in report order, and :class:`ConfigError`, the one error for a value a person has to fix. Plain
Python: importing it starts neither JAX nor a worker.

>>> FEEDS
('none', 'double_buffer', 'grain_device_put')
>>> KNOBS[:4]
('num_workers', 'prefetch_buffer_size', 'device_buffer_size', 'feed')
"""

from __future__ import annotations

from typing import Literal, get_args


class ConfigError(ValueError):
    """A config key or value a person has to fix; the message names it, the value and what to do."""


Feed = Literal["none", "double_buffer", "grain_device_put"]
Precision = Literal["fp32", "bf16"]
Source = Literal["arrayrecord", "memmap", "ram"]
Model = Literal["mlp", "cnn", "transformer"]

FEEDS: tuple[str, ...] = get_args(Feed)
PRECISIONS: tuple[str, ...] = get_args(Precision)
SOURCES: tuple[str, ...] = get_args(Source)
MODELS: tuple[str, ...] = get_args(Model)

# the loader and feed knobs (the quick study's grid) ...
LOADER_KNOBS = ("num_workers", "prefetch_buffer_size", "device_buffer_size", "feed")
# ... and the workload knobs its designed sample varies
WORKLOAD_KNOBS = ("batch_size", "source", "precision", "grad_accum_steps", "augment_cost", "image_size", "model")
# every measured knob, in the order reports show them
KNOBS = LOADER_KNOBS + WORKLOAD_KNOBS
