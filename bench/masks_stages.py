"""The Mask Renderer's stages, one 1080p frame of 20 objects, CPU time of the process (or the wall clock: --wall;
min and median of --rounds), this checkout's engine beside another revision's (`git archive` of it into a
temporary folder, loaded as a second package in the same process), stage by stage in turns, supervision's
annotators after each round; outputs compared first. What bench/results/masks.md's per-stage table comes from.
Which engine goes first in a turn alternates from round to round: a stage run right after the other engine's
(its reads) took 0.1-0.7 ms less than when run first.
    .venv/bin/python bench/masks_stages.py --before 3d00aa2 [--threads 1] [--rounds 40] [--wall]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as ComfyUI runs the pack (prestartup_script.py)

import cv2  # noqa: E402
import torch  # noqa: E402

from _common import ROOT  # noqa: E402
from bench_masks import OPACITY, THICKNESS, scene, supervision_path  # noqa: E402


def load(name: str, root: str):
    spec = importlib.util.spec_from_file_location(name, f"{root}/__init__.py", submodule_search_locations=[root])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def stages(pack, images, masks) -> dict:
    M, R = pack.utils.gpu_rendering.masks, pack.utils.gpu_rendering
    objects = pack.utils.inputs.masks.mask_objects(masks, None, images.shape[0], *images.shape[1:3])
    colors = torch.rand(len(objects), 3, generator=torch.Generator().manual_seed(0))
    height, width = images.shape[1:3]
    peak = M.tile_peaks(objects.masks)
    tiles = M._list_tiles(objects.masks, 0.5, True, peak)
    drawn = M.overlay(objects, height, width, colors, OPACITY, THICKNESS, 1.0, 0.0, 0.6, 0.5, peak)
    node = pack.nodes.masks.MaskRenderer
    nothing = R.primitives.empty(torch.device("cpu"))

    def run(**options):
        return node.run(images, masks=masks, opacity=OPACITY, outline_width=float(THICKNESS), **options)

    return {
        "tile peaks": lambda: M.tile_peaks(objects.masks),
        "tile listing": lambda: M._list_tiles(objects.masks, 0.5, True, peak),
        "marching squares": lambda: M._contour_pieces(tiles, 0.5),
        "memory estimate": lambda: M.overlay_memory(objects, height, width, 0.5, True, 0.0, peak),
        "whole overlay (peaks given)": lambda: M.overlay(
            objects, height, width, colors, OPACITY, THICKNESS, 1.0, 0.0, 0.6, 0.5, peak
        ),
        "draw, 3 outputs": lambda: R.draw(images, drawn.prims, drawn.atlas, layer_alpha="straight"),
        "draw, image only": lambda: R.draw(images, drawn.prims, drawn.atlas, layer_alpha="straight", image_only=True),
        "draw nothing, 3 outputs": lambda: R.draw(images, nothing, None, layer_alpha="straight"),
        "whole node, 3 outputs": run,
        "whole node, image only": lambda: run(outputs="image only"),
        "whole node, halo 8 and labels": lambda: run(halo_width=8.0, labels="id"),
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", required=True, help="the revision to compare with")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--wall", action="store_true", help="the wall clock, not the process's CPU time")
    args = parser.parse_args()
    clock = time.perf_counter if args.wall else time.process_time
    torch.set_num_threads(args.threads)
    cv2.setNumThreads(args.threads)
    images, masks = scene(1)
    with tempfile.TemporaryDirectory() as folder:
        archive = subprocess.run(["git", "archive", args.before], cwd=ROOT, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", folder], input=archive, check=True)
        packs = [load("rasterkit", str(ROOT)), load("rasterkit_before", folder)]  # this one first: its threads
        after, before = (stages(pack, images, masks) for pack in packs)
        engines = [("after", after), ("before", before)]
        for name in after:  # warm: compiled or loaded from numba's cache
            after[name](), before[name]()
        for options in ({}, {"outputs": "image only"}, {"halo_width": 8.0, "labels": "id"}):
            ours, theirs = (
                pack.nodes.masks.MaskRenderer.run(images, masks=masks, opacity=OPACITY, outline_width=2.0, **options)
                for pack in packs
            )
            differences = [float((a - b).abs().max()) for a, b in zip(ours, theirs, strict=True)]
            print(f"outputs {options or 'default'}: max difference (image, alpha, layer) {differences}")
        times = {(name, engine): [] for name in after for engine, _ in engines}
        faults = {}
        sv = []
        for round_ in range(args.rounds):
            for name in after:
                for engine, calls in engines[:: 1 if round_ % 2 else -1]:
                    start_faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
                    start = clock()
                    calls[name]()
                    times[name, engine].append(clock() - start)
                    faults[name, engine] = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - start_faults
            start = clock()
            supervision_path(images, masks)
            sv.append(clock() - start)
    heading = f"ms, {'wall clock' if args.wall else 'CPU time'}, min of {args.rounds} (median; page faults a call)"
    print(f"{'stage':32s} {'before':>8s} {'after':>8s}  {heading}")
    for name in after:
        b, a = (sorted(times[name, engine]) for engine in ("before", "after"))
        medians = f"{statistics.median(b) * 1e3:.2f} / {statistics.median(a) * 1e3:.2f}"
        counted = f"{faults[name, 'before']} / {faults[name, 'after']}"
        print(f"{name:32s} {b[0] * 1e3:8.2f} {a[0] * 1e3:8.2f}  ({medians}; {counted})")
    print(f"supervision Mask+Polygon         {min(sv) * 1e3:8.2f}")


if __name__ == "__main__":
    main()
