"""PrimitiveMesh's memory estimates (color_optimizer.search_memory, render_memory) against the peak
they reach: each run in a fresh process (an allocator keeps what a run before freed, which would hide
the peak), the rise of its peak RSS over its resident size before the run. Within 2x at three sizes."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

RUN = r"""
import json, sys
import torch
from utils import color_optimizer as co
from utils.color_optimizer.search import random_shapes
from utils.core.device import MEMORY_FRACTION, free_memory_bytes

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024

job, size, kinds, candidates, mutations = json.loads(sys.argv[1])
g = torch.Generator().manual_seed(0)
if job == "search":
    target = torch.rand(1, size, size, 3, generator=g)
    co.approximate(torch.rand(1, 16, 16, 3), 1, co.kind_codes(kinds), candidates=4, mutations=2)  # compiles
    run = lambda: co.approximate(target, 2, co.kind_codes(kinds), candidates=candidates, mutations=mutations,
                                 generator=g)
    estimate = co.search_memory(1, size, size, 3, co.kind_codes(kinds), 128, candidates, mutations, "cpu")
else:  # 100 shapes spread over the canvas, frames every 2nd
    kind, params = random_shapes(co.kind_codes(kinds), 100, 64, 64, g, "cpu")
    result = co.Approximation(kind=kind[None], params=co.scale_params(kind, params, 3.0)[None],
                              color=torch.rand(1, 100, 3, generator=g), alpha=torch.full((1, 100), 0.5),
                              count=torch.tensor([100]), error=torch.zeros(1, 101), background=torch.rand(1, 3),
                              height=64, width=64)
    run = lambda: co.render(result, size, size, size / 64, 2)
    estimate = co.render_memory(1, 100, size, size, 3, 2, free_memory_bytes("cpu") * MEMORY_FRACTION)
open("/proc/self/clear_refs", "w").write("5")
before = status("VmRSS")
run()
print(json.dumps([status("VmHWM") - before, estimate]))
"""


def measured(job, size, kinds, candidates=0, mutations=0, **env):
    out = subprocess.run(
        [sys.executable, "-c", RUN, json.dumps([job, size, kinds, candidates, mutations])],
        cwd=ROOT,
        env={**os.environ, "RASTERKIT_DISABLE_CUPY": "1", **env},
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    return json.loads(out.stdout.splitlines()[-1])


needs_proc = pytest.mark.skipif(sys.platform != "linux", reason="peak RSS through /proc")


@needs_proc
@pytest.mark.parametrize(
    "job, size, kinds, candidates, mutations, env",
    [
        # the torch path (a GPU without CuPy): the first shape's slots, every row of every candidate, PART_ROWS
        # at a time
        ("search", 128, "triangle", 2000, 50, {"RASTERKIT_DISABLE_NUMBA": "1"}),
        ("search", 256, "triangle", 2000, 50, {"RASTERKIT_DISABLE_NUMBA": "1"}),
        ("search", 384, "triangle", 2000, 50, {"RASTERKIT_DISABLE_NUMBA": "1"}),
        # numba's loops on the CPU: slots for Beziers and 4-gons only
        ("search", 96, "combo", 1000, 8, {}),
        ("search", 160, "combo", 1000, 8, {}),
        ("search", 224, "combo", 1000, 8, {}),
        ("render", 192, "triangle", 0, 0, {}),
        ("render", 384, "triangle", 0, 0, {}),
        ("render", 576, "combo", 0, 0, {}),
    ],
)
def test_estimates_are_within_twice_the_peak(job, size, kinds, candidates, mutations, env):
    peak, estimate = measured(job, size, kinds, candidates, mutations, **env)
    assert peak / 2 <= estimate <= 2 * peak, (peak, estimate)
