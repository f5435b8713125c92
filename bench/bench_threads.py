"""Threads that do not fight: each engine's CPU call (numba's parallel loops between torch ops) timed quiet
and with two busy processes beside it (python processes in torch matmul loops, as a ComfyUI server is
rarely alone), under OpenMP's and numba's defaults ("before") and under the settings the pack makes
("after": OMP_WAIT_POLICY=PASSIVE from prestartup_script.py, which ComfyUI runs before it imports torch,
numba's threading layer with its OpenMP's PASSIVE policy and its loops in parts the threads take as they
finish, from utils/core/numba.py). Goal: every engine within 2x of its quiet time. The busy processes
run one thread each (two busy cores) and then torch's default threads each (as many threads as cores,
each): with per-thread fair scheduling a two-thread call then gets half, then a third, of the machine,
so CPU-bound work cannot do better than 2x, then 3x, its quiet time. One run:
    .venv/bin/python bench/bench_threads.py [--repeat N]

Each configuration runs in PROCESSES processes of its own (OpenMP reads its settings once, when it loads),
the median of theirs reported: a process's times can sit at one of two levels for its whole life
(glibc's malloc hands out the same sizes from fresh pages or from reused ones: the small overlay draw
took 0.65 ms in some processes and 3.5 ms, with 10x the page faults, in others).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from _common import ROOT, report, table

REPEAT = int(sys.argv[sys.argv.index("--repeat") + 1]) if "--repeat" in sys.argv else 5
# numba's default layer where TBB is not installed is omp: "before" names it, so the pack leaves it be
CONFIGS = {"before": {"NUMBA_THREADING_LAYER": "omp"}, "after": {}}
BUSY = "import sys, torch\n{}a = torch.randn(384, 384)\nwhile True:\n    a = (a @ a).clamp_(-1, 1)\n"
LOADS = {"busy, 1 thread each": "torch.set_num_threads(1)\n", "busy, default threads": ""}


def engines():
    """name -> a call of that engine on the CPU (small inputs: the per-call set-up is what fights)."""
    import torch

    from utils import color_optimizer, gpu_rendering
    from utils import mesh_rasterizer as M

    generator = torch.Generator().manual_seed(0)
    frames = torch.rand(4, 256, 256, 3, generator=generator)
    discs = gpu_rendering.discs(0, torch.rand(200, 2, generator=generator) * 256, 6.0, (1.0, 0.5, 0.0, 1.0))
    series = torch.rand(8, 400, generator=generator)
    target = torch.rand(1, 48, 48, 3, generator=generator)
    kinds = color_optimizer.kind_codes("triangle, ellipse")

    import trimesh

    ball = trimesh.creation.icosphere(subdivisions=4)
    vertices = torch.tensor(ball.vertices, dtype=torch.float32)
    clip = torch.cat([vertices * 0.5, torch.ones(len(vertices), 1)], 1)[None].expand(2, -1, -1).contiguous()
    faces = torch.tensor(ball.faces, dtype=torch.int32)
    return {
        "overlay draw": lambda: gpu_rendering.draw(frames, discs, device="cpu"),
        "mesh rasterize": lambda: M.rasterize_views(clip, faces, 256, 256),
        "line plots": lambda: gpu_rendering.render_polylines(series, 128, 256, device="cpu"),
        "primitive search": lambda: color_optimizer.approximate(
            target, 2, kinds, candidates=32, mutations=8, generator=torch.Generator().manual_seed(0)
        ),
    }


def child() -> None:
    """Time every engine here (after a warm-up call each): median seconds as JSON on stdout."""
    import numba

    from _common import timed

    calls = engines()
    times = {name: timed(call, repeat=REPEAT, warmup=1) for name, call in calls.items()}
    policy = os.environ.get("OMP_WAIT_POLICY", "unset")
    print(json.dumps({"times": times, "layer": numba.threading_layer(), "policy": policy}))


PROCESSES = 3
LAYER_SETTINGS = ("NUMBA_THREADING_LAYER", "NUMBA_THREADING_LAYER_PRIORITY")  # the user's, which the pack honours


def run_child(env: dict) -> dict:
    """The median over PROCESSES child processes of each engine's time, with the first child's settings."""
    runs = [_run_child(env) for _ in range(PROCESSES)]
    times = {name: sorted(run["times"][name] for run in runs)[PROCESSES // 2] for name in runs[0]["times"]}
    return {**runs[0], "times": times}


def _run_child(env: dict) -> dict:
    environment = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", *LAYER_SETTINGS)}
    environment.update(env)
    if "NUMBA_THREADING_LAYER" not in env:  # "after": what ComfyUI's start sets before torch loads
        environment.update(_prestartup_settings())
    out = subprocess.run(
        [sys.executable, __file__, "--child", "--repeat", str(REPEAT)],
        env=environment,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _prestartup_settings() -> dict:
    """The variables prestartup_script.py sets where the user has not (read from a fresh process)."""
    code = (
        f"import os, runpy; before = dict(os.environ); runpy.run_path({str(ROOT / 'prestartup_script.py')!r}); "
        "import json; print(json.dumps({k: v for k, v in os.environ.items() if before.get(k) != v}))"
    )
    clean = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    return json.loads(subprocess.run([sys.executable, "-c", code], env=clean, capture_output=True, text=True).stdout)


def main() -> None:
    results = {}
    for config, env in CONFIGS.items():
        results[config, "quiet"] = run_child(env)
        for load, setting in LOADS.items():
            busy = [subprocess.Popen([sys.executable, "-c", BUSY.format(setting)]) for _ in range(2)]
            try:
                time.sleep(2)  # the busy processes at full speed first
                results[config, load] = run_child(env)
            finally:
                for process in busy:
                    process.kill()
                    process.wait()
    sections = []
    for load in LOADS:
        rows = []
        for name in results["before", "quiet"]["times"]:
            row = [name]
            for config in CONFIGS:
                quiet, busy = (results[config, key]["times"][name] for key in ("quiet", load))
                row += [f"{quiet * 1000:.1f}", f"{busy * 1000:.1f}", f"{busy / quiet:.1f}x"]
            rows.append(row)
        layers = "; ".join(
            f"{c}: numba's {results[c, 'quiet']['layer']} layer, OMP_WAIT_POLICY {results[c, 'quiet']['policy']}"
            for c in CONFIGS
        )
        head = ["engine (CPU)", "before quiet ms", "before busy ms", "ratio", "after quiet ms", "after busy ms"]
        sections.append((f"Two processes {load}. {layers}", table([*head, "ratio"], rows)))
    report(
        "threads",
        "Threads that do not fight: engines quiet and beside two busy torch processes",
        sections,
        f"python bench/bench_threads.py --repeat {REPEAT}",
    )


if __name__ == "__main__":
    if "--child" in sys.argv:
        child()
    else:
        main()
