"""Generated task families: many Harbor bundles of text, CSV and file transformations, split by seed.

``generate(family, seed)`` draws one task (`Instance`): input files, 2 to 4 operations whose parameters the
instruction names, a reference solution of short shell commands and one pytest assertion per check (the
count grows with the operations and the files they touch, for the dense reward P / S, T1 §5.2).
``write_bundle`` writes it in Harbor layout. ``synth_split`` draws a training and a held-out side that share
no seed and no parameter tuple, and ``write_split`` writes them as two pool directories (``t1 tasks synth``).
"""

from t1_tasks.synth.bundle import render_instruction, render_solution, render_tests, write_bundle
from t1_tasks.synth.families import FAMILIES, generate
from t1_tasks.synth.model import APP, Check, Instance, Step
from t1_tasks.synth.split import SeedSplit, SplitError, split_seeds, synth_split, write_split

__all__ = [
    "APP",
    "FAMILIES",
    "Check",
    "Instance",
    "SeedSplit",
    "SplitError",
    "Step",
    "generate",
    "render_instruction",
    "render_solution",
    "render_tests",
    "split_seeds",
    "synth_split",
    "write_bundle",
    "write_split",
]
