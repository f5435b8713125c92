"""Rounded boxes and segments: RasterKit against OpenCV and skia-python, full paths, one run.

Every path starts from and returns a float32 IMAGE as ComfyUI holds it: the peers convert to uint8,
draw with anti-aliasing, blend and convert back; RasterKit draws on the float frames directly and also
returns alpha and layer. The floor is what any path producing those three outputs pays: allocating
them and writing each once (the frames copied, alpha and layer zeroed). Timed in turns (each round
runs every path once), medians; peak memory from a separate call.
    .venv/bin/python bench/bench_boxes.py [--quick]
"""

from __future__ import annotations

import os
import sys

import cv2
import numpy as np
import torch

from _common import output_floor, peak_memory, report, table, timed, timed_together
from utils import gpu_rendering as R  # noqa: E402  (_common puts the repository root on sys.path)
from utils.core.device import torch_device  # noqa: E402

QUICK = "--quick" in sys.argv
STROKE, RADIUS, FILL = 3.0, 12.0, 0.25


def random_boxes(n, width, height, seed=0):
    rng = np.random.default_rng(seed)
    size = rng.uniform(40, 300, (n, 2))
    corner = rng.uniform(0, 1, (n, 2)) * (np.array([width, height]) - size)
    return np.concatenate([corner, corner + size], 1).astype(np.float32)


def random_segments(n, width, height, seed=1):
    rng = np.random.default_rng(seed)
    a = rng.uniform(0, 1, (n, 2)) * [width, height]
    b = a + rng.normal(0, 150, (n, 2))
    return a.astype(np.float32), b.astype(np.float32)


# -- peers -------------------------------------------------------------------------------------------


def to_uint8(frame):
    return (np.clip(frame, 0, 1) * 255 + 0.5).astype(np.uint8)


def opencv_boxes(frame, boxes):
    """What supervision-style annotators do: fills on an overlay blended once (overlaps do not
    accumulate), then rounded outlines from lines and quarter ellipses with LINE_AA."""
    image = to_uint8(frame)
    overlay = image.copy()
    for x1, y1, x2, y2 in boxes.astype(int):
        cv2.rectangle(overlay, (x1, y1), (x2, y2), (0, 255, 0), -1)
    image = cv2.addWeighted(overlay, FILL, image, 1 - FILL, 0)
    r, t = int(RADIUS), int(STROKE)
    for x1, y1, x2, y2 in boxes.astype(int):
        cv2.line(image, (x1 + r, y1), (x2 - r, y1), (255, 0, 0), t, cv2.LINE_AA)
        cv2.line(image, (x1 + r, y2), (x2 - r, y2), (255, 0, 0), t, cv2.LINE_AA)
        cv2.line(image, (x1, y1 + r), (x1, y2 - r), (255, 0, 0), t, cv2.LINE_AA)
        cv2.line(image, (x2, y1 + r), (x2, y2 - r), (255, 0, 0), t, cv2.LINE_AA)
        for centre, angle in (
            ((x1 + r, y1 + r), 180),
            ((x2 - r, y1 + r), 270),
            ((x2 - r, y2 - r), 0),
            ((x1 + r, y2 - r), 90),
        ):
            cv2.ellipse(image, centre, (r, r), angle, 0, 90, (255, 0, 0), t, cv2.LINE_AA)
    return image.astype(np.float32) / 255


def opencv_segments(frame, a, b):
    image = to_uint8(frame)
    overlay = image.copy()
    for p, q in zip(a.astype(int), b.astype(int), strict=True):
        cv2.line(overlay, tuple(p), tuple(q), (255, 255, 255), 2, cv2.LINE_AA)
    return cv2.addWeighted(overlay, 0.8, image, 0.2, 0).astype(np.float32) / 255


def skia_canvas(frame):
    import skia

    rgba = np.empty(frame.shape[:2] + (4,), np.uint8)
    rgba[..., :3] = to_uint8(frame)
    rgba[..., 3] = 255
    return skia, rgba, skia.Surface(rgba)


def skia_boxes(frame, boxes):
    skia, rgba, surface = skia_canvas(frame)
    fill = skia.Paint(AntiAlias=True, Color=skia.ColorSetARGB(int(FILL * 255), 0, 255, 0))
    stroke = skia.Paint(AntiAlias=True, Color=skia.ColorRED, Style=skia.Paint.kStroke_Style, StrokeWidth=STROKE)
    with surface as canvas:
        for x1, y1, x2, y2 in boxes:
            rect = skia.RRect.MakeRectXY(skia.Rect(x1, y1, x2, y2), RADIUS, RADIUS)
            canvas.drawRRect(rect, fill)
            canvas.drawRRect(rect, stroke)
    return rgba[..., :3].astype(np.float32) / 255


def skia_segments(frame, a, b):
    skia, rgba, surface = skia_canvas(frame)
    paint = skia.Paint(
        AntiAlias=True, Color=skia.ColorSetARGB(204, 255, 255, 255), StrokeWidth=2, StrokeCap=skia.Paint.kRound_Cap
    )
    with surface as canvas:
        for p, q in zip(a, b, strict=True):
            canvas.drawLine(float(p[0]), float(p[1]), float(q[0]), float(q[1]), paint)
    return rgba[..., :3].astype(np.float32) / 255


def skia_available():
    try:
        import skia  # noqa: F401
    except ImportError:
        return False
    return True


# -- RasterKit ---------------------------------------------------------------------------------------


def rasterkit_boxes(images, boxes_per_frame, device):
    frames = torch.arange(images.shape[0]).repeat_interleave(boxes_per_frame.shape[1])
    xyxy = torch.from_numpy(boxes_per_frame.reshape(-1, 4))
    prims = R.rounded_boxes(frames, xyxy, STROKE, RADIUS, (1, 0, 0, 1), (0, 1, 0, FILL))
    return R.draw(images, prims, device=device)


def torch_path(fn):
    """fn on the torch path (numba's loop off): what MPS, ROCm and CUDA without CuPy run."""

    def run():
        os.environ["RASTERKIT_DISABLE_NUMBA"] = "1"
        try:
            return fn()
        finally:
            del os.environ["RASTERKIT_DISABLE_NUMBA"]

    return run


def main():
    device = torch_device()
    sync = torch.cuda.synchronize if device.type == "cuda" else None
    repeat = 2 if QUICK else 7
    has_skia = skia_available()
    rows = []

    cases = [
        ("1 frame 3840x2160", 1, 2160, 3840, 100),
        ("1 frame 3840x2160", 1, 2160, 3840, 1000),
        ("16 frames 1920x1080", 16, 1080, 1920, 100),
        ("16 frames 1920x1080", 16, 1080, 1920, 1000),
    ]
    if QUICK:
        cases = cases[:1]
    for name, batch, height, width, n in cases:
        images = torch.rand(batch, height, width, 3)
        frames_np = images.numpy()
        boxes = np.stack([random_boxes(n, width, height, seed=f) for f in range(batch)])

        def ours_fn():
            return rasterkit_boxes(images, boxes, device)

        def cv_fn():
            return [opencv_boxes(frames_np[f], boxes[f]) for f in range(batch)]

        ours, cv, floor = timed_together([ours_fn, cv_fn, lambda: output_floor(images)], repeat)
        # the torch path only where it takes seconds, not minutes
        slow = timed(torch_path(ours_fn), 3) if device.type == "cpu" and batch == 1 else None
        sk = timed(lambda: [skia_boxes(frames_np[f], boxes[f]) for f in range(batch)], repeat) if has_skia else None
        memory = [peak_memory(fn, device)[1] for fn in (ours_fn, cv_fn)]
        rows.append(
            [
                f"{n} rounded boxes, {name}",
                f"{ours * 1e3:.1f} ({memory[0]})",
                f"{slow * 1e3:.1f}" if slow else "",
                f"{cv * 1e3:.1f} ({memory[1]})",
                f"{sk * 1e3:.1f}" if sk else "n/a",
                f"{floor * 1e3:.1f}",
                f"{ours / floor:.2f}x",
                f"{cv / ours:.2f}x",
            ]
        )

    images = torch.rand(1, 2160, 3840, 3)
    a, b = random_segments(500, 3840, 2160)
    prims = R.segments(0, torch.from_numpy(a), torch.from_numpy(b), 2.0, (1, 1, 1, 0.8))
    ours = timed(lambda: R.draw(images, prims, device=device), repeat, sync=sync)
    cv = timed(lambda: opencv_segments(images[0].numpy(), a, b), repeat)
    sk = timed(lambda: skia_segments(images[0].numpy(), a, b), repeat) if has_skia else None
    floor = timed(lambda: output_floor(images), repeat)
    rows.append(
        [
            "500 segments 2 px, 1 frame 3840x2160",
            f"{ours * 1e3:.1f}",
            "",
            f"{cv * 1e3:.1f}",
            f"{sk * 1e3:.1f}" if sk else "n/a",
            f"{floor * 1e3:.1f}",
            f"{ours / floor:.2f}x",
            f"{cv / ours:.2f}x",
        ]
    )

    sections = [
        (
            f"Full paths, float32 in and out, median ms (peak memory) (RasterKit on {device})",
            table(
                [
                    "case",
                    "RasterKit (numba's loop on the CPU)",
                    "RasterKit torch path",
                    "OpenCV (uint8, LINE_AA)",
                    "skia-python (uint8)",
                    "floor: 3 outputs written once",
                    "RasterKit / floor",
                    "RasterKit's speed / OpenCV's",
                ],
                rows,
            ),
        )
    ]
    if device.type == "cuda":
        # frames already on the GPU: the engine's own time, synchronised
        gpu_rows = []
        for n in (100, 1000):
            images = torch.rand(1, 2160, 3840, 3, device=device)
            xyxy = torch.from_numpy(random_boxes(n, 3840, 2160)).to(device)
            prims = R.rounded_boxes(0, xyxy, STROKE, RADIUS, (1, 0, 0, 1), (0, 1, 0, FILL))
            gpu_rows.append(
                [f"{n} rounded boxes, 3840x2160", f"{timed(lambda: R.draw(images, prims), 20, 3, sync) * 1e3:.2f}"]
            )
        sections.append(("GPU-resident frame, engine only", table(["case", "ms"], gpu_rows)))

    # the whole node, as ComfyUI calls it, on a CPU-resident batch
    import json

    from demo import load_pack

    node = load_pack().nodes.boxes.BoundingBoxRenderer
    node_rows = []
    for n in (100, 1000) if not QUICK else (100,):
        boxes = random_boxes(n, 3840, 2160)
        boxes_json = json.dumps(boxes.tolist())
        images = torch.rand(1, 2160, 3840, 3)

        def node_fn(**options):
            return node.run(
                images,
                boxes=boxes_json,
                stroke_width=STROKE,
                corner_radius=RADIUS,
                fill_opacity=FILL,
                labels="none",
                **options,
            )

        def image_only_fn():
            return node_fn(outputs="image only")

        t_node, t_image, t_cv, t_floor = timed_together(
            [node_fn, image_only_fn, lambda: opencv_boxes(images[0].numpy(), boxes), lambda: output_floor(images)],
            repeat,
        )
        node_rows.append(
            [
                f"{n} boxes, 1 frame 3840x2160",
                f"{t_node * 1e3:.1f} ({peak_memory(node_fn, device)[1]})",
                f"{t_image * 1e3:.1f} ({peak_memory(image_only_fn, device)[1]})",
                f"{t_cv * 1e3:.1f}",
                f"{t_floor * 1e3:.1f}",
                f"{t_node / t_floor:.2f}x",
                f"{t_cv / t_node:.2f}x",
                f"{t_cv / t_image:.2f}x",
            ]
        )

    sections.append(
        (
            "The node on a CPU IMAGE (image, alpha and straight-alpha layer outputs), median ms (peak memory)",
            table(
                [
                    "case",
                    "node",
                    "node, outputs image only",
                    "OpenCV (image only)",
                    "floor: 3 outputs written once",
                    "node / floor",
                    "node's speed / OpenCV's",
                    "image only: speed / OpenCV's",
                ],
                node_rows,
            ),
        )
    )
    report(
        "boxes",
        "Rounded boxes and segments (BoundingBoxRenderer engine)",
        sections,
        "make bench  # or .venv/bin/python bench/bench_boxes.py",
    )


if __name__ == "__main__":
    main()
