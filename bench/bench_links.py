"""Line links: batched kNN against scipy's cKDTree (and faiss when installed), and the whole
LineLinkRenderer against OpenCV drawing the same links, one run.
    .venv/bin/python bench/bench_links.py [--quick]
"""

from __future__ import annotations

import json
import sys

import cv2
import numpy as np
import torch

from _common import output_floor, peak_memory, report, table, timed, timed_together
from utils.core.device import faiss_usable, torch_device  # noqa: E402  (_common puts the repository root on sys.path)
from utils.gpu_curves import alternating_sign, bezier_polylines  # noqa: E402
from utils.gpu_graph import GraphOptions, knn_graph  # noqa: E402

QUICK = "--quick" in sys.argv
FRAMES = 10 if QUICK else 60


def ckdtree(points, k):
    from scipy.spatial import cKDTree

    for frame in points:
        cKDTree(frame).query(frame, k=k + 1)


def faiss_knn(points, k):
    import faiss

    for frame in points:
        index = faiss.IndexFlatL2(2)
        index.add(frame)
        index.search(frame, k + 1)


def opencv_links(frames, polylines_per_frame):
    """The peer's full path: float -> uint8, cv2.polylines with LINE_AA per frame, blend, -> float."""
    out = []
    for frame, lines in zip(frames, polylines_per_frame, strict=True):
        image = (np.clip(frame, 0, 1) * 255 + 0.5).astype(np.uint8)
        overlay = image.copy()
        cv2.polylines(overlay, lines, False, (255, 255, 255), 2, cv2.LINE_AA)
        out.append(cv2.addWeighted(overlay, 0.8, image, 0.2, 0).astype(np.float32) / 255)
    return out


def main():
    device = torch_device()
    sync = torch.cuda.synchronize if device.type == "cuda" else None
    generator = torch.Generator().manual_seed(0)
    knn_rows = []
    for n in (100, 1000) if QUICK else (100, 1000, 5000):
        xy = torch.rand(FRAMES, n, 2, generator=generator) * 1000
        visible = torch.ones(FRAMES, n, dtype=torch.bool)
        points = xy.numpy()
        ours = timed(lambda: knn_graph(xy, visible, GraphOptions(k=3), device=device), 3, sync=sync)
        tree = timed(lambda: ckdtree(points, 3), 3)
        row = [f"N = {n}, {FRAMES} frames", f"{ours * 1e3:.1f}", f"{tree * 1e3:.1f}"]
        row.append(f"{timed(lambda: faiss_knn(points, 3), 3) * 1e3:.1f}" if faiss_usable() else "not installed")
        knn_rows.append(row)

    # the whole node: 300 points, k=3, curves, on 1080p frames
    from demo import load_pack

    node = load_pack().nodes.links.LineLinkRenderer
    frames = torch.rand(FRAMES, 1080, 1920, 3, generator=generator)
    base = torch.rand(1, 300, 2, generator=generator) * torch.tensor([1920.0, 1080.0])
    xy = base + torch.cumsum(torch.randn(FRAMES, 300, 2, generator=generator) * 2, 0)
    tracks = {"xy": xy, "visible": torch.ones(FRAMES, 300, dtype=torch.bool)}
    options = dict(
        tracks_json="",
        tracks=tracks,
        k=3,
        curve="bezier",
        curvature=0.2,
        width=2.0,
        opacity=0.8,
        point_radius=0.0,
        hysteresis=1.0,
    )
    # the same curves, flattened the same way, for OpenCV
    _, _, _, edges_json = node.run(frames, **options)
    lines = []
    for t, edges in enumerate(json.loads(edges_json)):
        pairs = torch.tensor(edges).reshape(-1, 2)
        points, lengths = bezier_polylines(
            xy[t, pairs[:, 0]], xy[t, pairs[:, 1]], 0.2, alternating_sign(pairs[:, 0], pairs[:, 1])
        )
        lines.append([p[:n].round().int().numpy() for p, n in zip(points, lengths.tolist(), strict=True)])
    frames_np = frames.numpy()

    def node_fn():
        return node.run(frames, **options)

    def image_only_fn():
        return node.run(frames, **options, outputs="image only")

    def peer_fn():
        return opencv_links(frames_np, lines)

    ours, image_only, peer, floor, image_floor = timed_together(
        [node_fn, image_only_fn, peer_fn, lambda: output_floor(frames), lambda: output_floor(frames, True)],
        2 if QUICK else 5,
    )
    # each path on its own, calls back to back: the memory a call frees is written again by the next
    # before this VM's host takes it back (see the note below)
    in_a_row = [timed(fn, 2 if QUICK else 5) for fn in (node_fn, image_only_fn, peer_fn)]
    memory = [peak_memory(fn, device)[1] for fn in (node_fn, image_only_fn, peer_fn)]
    case = f"{FRAMES} frames 1920x1080, 300 points, k=3, Bezier links"
    row_rows = [
        [case, outputs, f"{seconds * 1e3:.0f}", f"{in_a_row[2] * 1e3:.0f}", f"{in_a_row[2] / seconds:.2f}x"]
        for outputs, seconds in (("image, alpha and layer", in_a_row[0]), ("image only", in_a_row[1]))
    ]
    node_rows = [
        [
            case,
            "image, alpha and layer",
            f"{ours * 1e3:.0f} ({memory[0]})",
            f"{peer * 1e3:.0f} ({memory[2]})",
            f"{floor * 1e3:.0f}",
            f"{ours / floor:.2f}x",
            f"{peer / ours:.2f}x",
        ],
        [
            case,
            "image only",
            f"{image_only * 1e3:.0f} ({memory[1]})",
            "",
            f"{image_floor * 1e3:.0f}",
            f"{image_only / image_floor:.2f}x",
            f"{peer / image_only:.2f}x",
        ],
    ]

    report(
        "links",
        "Line links: kNN graphs and the LineLinkRenderer",
        [
            (
                f"kNN (k=3) over all frames, median ms (RasterKit on {device})",
                table(["case", "RasterKit batched", "cKDTree per frame", "faiss-cpu per frame"], knn_rows),
            ),
            (
                "Whole node vs OpenCV drawing the same links (float in and out), median ms (peak memory), in turns",
                table(
                    [
                        "case",
                        "node outputs",
                        "RasterKit node",
                        "OpenCV LINE_AA path (links given)",
                        "floor: those outputs written once",
                        "node / floor",
                        "node's speed / OpenCV's",
                    ],
                    node_rows,
                ),
            ),
            (
                "The same, each path called 5 times in a row, median ms",
                table(
                    [
                        "case",
                        "node outputs",
                        "RasterKit node",
                        "OpenCV LINE_AA path (links given)",
                        "node's speed / OpenCV's",
                    ],
                    row_rows,
                ),
            ),
            (
                "Notes",
                "This VM reports the memory a process frees to its host (virtio-balloon free page reporting), "
                "which takes it back about 2 s later: the next first touch of that memory faults on the host "
                "too, 4 GiB in 3.7-4.7 s against 0.3 s when written again at once (measured here). Physical "
                "machines have no such cost. In turns, each path's memory has been taken back before its next "
                "call; OpenCV's path keeps most of its memory in its heap between calls, RasterKit's 4 GB of "
                "outputs are fresh. In a row, a call can reuse memory the last one freed before the host takes "
                "it back.",
            ),
        ],
        "make bench  # or .venv/bin/python bench/bench_links.py",
    )


if __name__ == "__main__":
    main()
