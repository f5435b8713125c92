"""Mask overlays: the Mask Renderer node against supervision's MaskAnnotator + PolygonAnnotator (and the
OpenCV code they run), on the same 1080p frames with 20 objects, side by side in one run.

Every path starts from what ComfyUI holds (float32 IMAGE frames, float32 MASK [frames * 20, H, W], SAM3
Video Track's layout) and returns float32 frames: the peers convert the frames to uint8 and the masks to
bool, annotate (fill blended at 0.5, 2 px outlines of each mask's contours) and convert back; the node
also returns alpha and a straight-alpha layer. Timed in turns, medians: the CPU time of the process (all
its threads), then the wall clock, then the CPU time where each call starts on fresh memory (glibc's free
memory given back first: the outputs' pages are faulted anew, as in ComfyUI, which keeps earlier outputs).
    .venv/bin/python bench/bench_masks.py [--quick] [--threads N]      (pip install -r bench/requirements.txt)
"""

from __future__ import annotations

import os
import sys
import time

# as ComfyUI runs the pack (prestartup_script.py, before torch loads): OpenMP's idle threads sleep. Spinning
# ones fight numba's for the cores, and on a busy machine torch's default threads then cost 5-10x
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import cv2  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from _common import report, table, timed_together, trim_heap  # noqa: E402

QUICK = "--quick" in sys.argv
THREADS = int(sys.argv[sys.argv.index("--threads") + 1]) if "--threads" in sys.argv else None
if THREADS:  # torch's threads (the pack's loops take as many) and OpenCV's, e.g. 1 on a shared machine
    torch.set_num_threads(THREADS)
    cv2.setNumThreads(THREADS)
HEIGHT, WIDTH, OBJECTS = 1080, 1920, 20
OPACITY, THICKNESS = 0.5, 2


def scene(frames: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """float32 images [F,H,W,3] and masks [F*OBJECTS,H,W]: wavy blobs 80..280 px across, moving."""
    rng = np.random.default_rng(seed)
    images = torch.rand(frames, HEIGHT, WIDTH, 3, generator=torch.Generator().manual_seed(seed))
    yy, xx = np.mgrid[0:HEIGHT, 0:WIDTH].astype(np.float32)
    centre = rng.uniform([150, 150], [WIDTH - 150, HEIGHT - 150], (OBJECTS, 2))
    radii = rng.uniform(40, 140, (OBJECTS, 2))
    masks = np.zeros((frames, OBJECTS, HEIGHT, WIDTH), np.float32)
    for f in range(frames):  # scene set-up, not timed
        for k in range(OBJECTS):
            cx, cy = centre[k] + 6 * f
            masks[f, k] = ((xx - cx) / radii[k, 0]) ** 2 + ((yy - cy) / radii[k, 1]) ** 2 + 0.3 * np.sin(
                xx / 17 + k
            ) < 1
    return images, torch.from_numpy(masks.reshape(frames * OBJECTS, HEIGHT, WIDTH))


def supervision_path(images: torch.Tensor, masks: torch.Tensor):
    import supervision as sv

    fill, outline = sv.MaskAnnotator(opacity=OPACITY), sv.PolygonAnnotator(thickness=THICKNESS)
    out = []
    bool_masks = masks.numpy().reshape(images.shape[0], OBJECTS, HEIGHT, WIDTH) > 0.5
    for f in range(images.shape[0]):  # supervision annotates one frame at a time
        frame = (images[f].numpy().clip(0, 1) * 255 + 0.5).astype(np.uint8)
        detections = sv.Detections(xyxy=np.zeros((OBJECTS, 4)), mask=bool_masks[f], class_id=np.arange(OBJECTS))
        frame = outline.annotate(fill.annotate(frame, detections), detections)
        out.append(torch.from_numpy(frame.astype(np.float32) / 255))
    return torch.stack(out)


def opencv_path(images: torch.Tensor, masks: torch.Tensor):
    """What those annotators do, in plain OpenCV: colour each mask on a copy, blend once with
    addWeighted, then findContours and anti-aliased polylines per object."""
    palette = (np.random.default_rng(1).uniform(0, 255, (OBJECTS, 3))).astype(np.uint8)
    out = []
    bool_masks = masks.numpy().reshape(images.shape[0], OBJECTS, HEIGHT, WIDTH) > 0.5
    for f in range(images.shape[0]):
        frame = (images[f].numpy().clip(0, 1) * 255 + 0.5).astype(np.uint8)
        coloured = frame.copy()
        for k in range(OBJECTS):
            coloured[bool_masks[f, k]] = palette[k]
        frame = cv2.addWeighted(coloured, OPACITY, frame, 1 - OPACITY, 0)
        for k in range(OBJECTS):
            contours, _ = cv2.findContours(
                bool_masks[f, k].astype(np.uint8), cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE
            )
            cv2.polylines(frame, contours, True, palette[k].tolist(), THICKNESS, cv2.LINE_AA)
        out.append(torch.from_numpy(frame.astype(np.float32) / 255))
    return torch.stack(out)


def main():
    from demo import load_pack

    node = load_pack().nodes.masks.MaskRenderer
    repeat = 3 if QUICK else 9
    timings = [
        ("CPU time of the process", {"clock": time.process_time}),
        ("Wall clock", {}),
        ("CPU time, each call on fresh memory (malloc_trim first)", {"clock": time.process_time, "before": trim_heap}),
    ]
    rows = {heading: [] for heading, _ in timings}
    for frames in (1,) if QUICK else (1, 4):
        images, masks = scene(frames)

        def run(outputs="image, alpha and layer"):
            return node.run(images, masks=masks, opacity=OPACITY, outline_width=float(THICKNESS), outputs=outputs)

        paths = [
            run,
            lambda: run("image only"),
            lambda: supervision_path(images, masks),
            lambda: opencv_path(images, masks),
        ]
        for heading, clock in timings:
            t_node, t_image, t_sv, t_cv = timed_together(paths, repeat, **clock)
            per = 1e3 / frames
            rows[heading].append(
                [
                    f"{OBJECTS} objects, {frames} frame(s) {WIDTH}x{HEIGHT}",
                    f"{t_node * per:.1f}",
                    f"{t_image * per:.1f}",
                    f"{t_sv * per:.1f}",
                    f"{t_cv * per:.1f}",
                    f"{t_sv / t_node:.2f}x",
                    f"{t_sv / t_image:.2f}x",
                ]
            )
    header = [
        "case",
        "node (3 outputs)",
        "node, image only",
        "supervision Mask+Polygon",
        "OpenCV equivalent",
        "node's speed / supervision's",
        "image only: speed / supervision's",
    ]
    threads = f"{THREADS} thread(s)" if THREADS else f"default threads ({torch.get_num_threads()})"
    report(
        "masks",
        "Mask overlays (MaskRenderer) against supervision",
        [
            (f"{heading}, float32 in and out, median ms per frame, {threads}", table(header, rows[heading]))
            for heading, _ in timings
        ],
        ".venv/bin/python bench/bench_masks.py"
        + (f" --threads {THREADS}" if THREADS else "")
        + "  # pip install -r bench/requirements.txt",
    )


if __name__ == "__main__":
    main()
