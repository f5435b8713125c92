"""Point tracking through a batch of frames: Shi-Tomasi corners followed by pyramidal Lucas-Kanade optical
flow (OpenCV, on the host), points that fail the forward-backward check dropped and new corners detected so
that the count stays near max_points.

A track lives over one span of frames (a lost point never comes back), so the loop keeps only each frame's
live points, and the dense outputs [T,N] (N: every track started) and their JSON are built once, at the
end. Their size is the one term that grows faster than the frames (new tracks keep starting); most of the
JSON is hidden points, written as repeated text, so no Python object is made per hidden point.
"""

from __future__ import annotations

import numpy as np
import torch

from ..core.device import check_memory

WINDOW = (21, 21)  # Lucas-Kanade search window, pixels
PYRAMID_LEVELS = 3
ITERATIONS, EPSILON = 30, 0.01  # Lucas-Kanade stopping criteria
HIDDEN_POINT = '{"x": -100.0, "y": -100.0}'  # a hidden point in tracks_json (utils.inputs.tracks.to_json's format)
VISIBLE_POINT = '{"x": %r, "y": %r}'  # json.dumps writes floats with repr
# memory model (bytes, measured with tests/gpu_graph/test_tracking.py): the luminance's float32 temporaries
# per pixel of the batch, OpenCV's per-frame work (pyramids, eigenvalue images) per pixel of a frame,
# and the characters of a visible point in tracks_json
GRAY_BYTES_PER_PIXEL = 13
FLOW_BYTES_PER_PIXEL = 40
VISIBLE_POINT_CHARS = 52


def _gray(images: torch.Tensor) -> np.ndarray:
    """images float [T,H,W,C] (C >= 3) -> luminance uint8 [T,H,W]."""
    luminance = images[..., :3] @ torch.tensor([0.299, 0.587, 0.114], dtype=images.dtype)
    return (luminance.clamp(0, 1) * 255 + 0.5).to(torch.uint8).cpu().numpy()


def tracking_memory(frames: int, height: int, width: int, tracks: int = 0, points: int = 0) -> int:
    """Estimated peak bytes of track_points on `frames` frames of height x width that start `tracks` tracks
    with `points` live points over all frames (0, 0: the loop alone, before they are known): the
    luminance and its temporaries, OpenCV's work on a frame, the live points, the dense outputs and
    tracks_json (held twice while it is joined)."""
    hidden = frames * tracks - points
    text = hidden * (len(HIDDEN_POINT) + 2) + points * VISIBLE_POINT_CHARS
    return (
        frames * height * width * GRAY_BYTES_PER_PIXEL
        + height * width * FLOW_BYTES_PER_PIXEL
        + points * 40
        + frames * tracks * 9
        + 2 * text
    )


def _follow(gray: np.ndarray, max_points: int, quality: float, min_distance: float, max_error: float, on_frame=None):
    """The live points of every frame of gray uint8 [T,H,W]: positions float32 [P,2], their frames and
    track ids int64 [P] (frame after frame, ids rising within a frame), and the number of tracks."""
    import cv2

    frames, height, width = gray.shape
    flow = dict(
        winSize=WINDOW,
        maxLevel=PYRAMID_LEVELS,
        criteria=(cv2.TERM_CRITERIA_EPS | cv2.TERM_CRITERIA_COUNT, ITERATIONS, EPSILON),
    )
    positions, ids = [], []  # per frame: points float32 [n,2] and their track ids int64 [n]
    points = np.zeros((0, 2), np.float32)
    track_ids = np.zeros(0, np.int64)
    next_id = 0
    for t in range(frames):  # optical flow is a recurrence over frames; each call handles all points
        if t > 0 and len(points):
            moved, ok, _ = cv2.calcOpticalFlowPyrLK(gray[t - 1], gray[t], points[:, None], None, **flow)
            back, ok_back, _ = cv2.calcOpticalFlowPyrLK(gray[t], gray[t - 1], moved, None, **flow)
            error = np.abs(back[:, 0] - points).max(1)
            inside = (moved[:, 0] >= 0).all(1) & (moved[:, 0, 0] < width) & (moved[:, 0, 1] < height)
            good = ok[:, 0].astype(bool) & ok_back[:, 0].astype(bool) & (error < max_error) & inside
            points, track_ids = moved[good, 0], track_ids[good]
        if len(points) < max_points:
            found = cv2.goodFeaturesToTrack(gray[t], max_points, quality, min_distance)
            if found is not None:
                found = found[:, 0]
                if len(points):  # only corners away from the points already tracked
                    near = np.linalg.norm(found[:, None] - points[None], axis=-1).min(1) < min_distance
                    found = found[~near]
                found = found[: max_points - len(points)]
                points = np.concatenate([points, found]).astype(np.float32)
                track_ids = np.concatenate([track_ids, np.arange(next_id, next_id + len(found))])
                next_id += len(found)
        positions.append(points)
        ids.append(track_ids)
        if on_frame is not None:
            on_frame(t + 1, frames)
    counts = [len(i) for i in ids]
    frame = np.repeat(np.arange(frames), counts)
    if not frame.size:
        return np.zeros((0, 2), np.float32), frame, np.zeros(0, np.int64), next_id
    return np.concatenate(positions), frame, np.concatenate(ids), next_id


def _hidden_run(count: int) -> str:
    """`count` hidden points of tracks_json, comma separated."""
    return (HIDDEN_POINT + ", ") * (count - 1) + HIDDEN_POINT if count > 0 else ""


def tracks_json(positions: np.ndarray, frame: np.ndarray, track: np.ndarray, frames: int, tracks: int) -> str:
    """utils.inputs.tracks.to_json of the dense tracks, character for character, written from the live points
    alone (positions float32 [P,2], frame and track int64 [P]; each track's frames one run): one list per
    track of per-frame {"x", "y"} rounded to 2 decimals, hidden points at -100, -100. Python objects are
    made for one track's live points at a time."""
    order = np.argsort(track, kind="stable")  # track after track, frames rising
    rounded = torch.from_numpy(positions[order]).round(decimals=2).numpy()
    first = frame[order]
    ends = np.searchsorted(track[order], np.arange(tracks + 1)).tolist()
    starts = first[ends[:-1]].tolist() if tracks else []
    texts = []
    for n, start in enumerate(starts):
        live = ", ".join([VISIBLE_POINT % (x, y) for x, y in rounded[ends[n] : ends[n + 1]].tolist()])
        after = frames - start - (ends[n + 1] - ends[n])
        texts.append("[" + ", ".join(part for part in (_hidden_run(start), live, _hidden_run(after)) if part) + "]")
    return "[" + ", ".join(texts) + "]"


def track_points(
    images: torch.Tensor,
    max_points: int = 200,
    quality: float = 0.01,
    min_distance: float = 10.0,
    max_error: float = 1.0,
    on_frame=None,
) -> tuple[torch.Tensor, torch.Tensor, str]:
    """Corner features followed through images float [T,H,W,C] (C >= 3, values 0..1, on the CPU), in order.

    Each frame's points move by pyramidal Lucas-Kanade flow from the frame before; a point whose flow
    fails, whose backward flow misses its start by max_error pixels or more, or that leaves the frame ends
    its track. Then, while fewer than max_points live, new Shi-Tomasi corners (quality relative to the
    best corner, min_distance pixels from each other and from the live points) start new tracks.
    on_frame(done, total): called after every frame (progress, interrupt checks).

    Returns xy float32 [T,N,2] (-1 where hidden), visible bool [T,N] (N: every track started, by the order
    of their starts) and their tracks_json (see tracks_json). The memory estimate is checked before the
    loop and again, with the track count, before the outputs are allocated (utils.core.device.check_memory).
    """
    frames, height, width = images.shape[:3]
    check_memory(tracking_memory(frames, height, width), f"images: {frames} frames of {width} x {height}", "cpu")
    gray = _gray(images)
    positions, frame, track, tracks = _follow(gray, max_points, quality, min_distance, max_error, on_frame)
    del gray
    check_memory(
        tracking_memory(frames, height, width, tracks, len(frame)),
        f"images: {frames} frames of {width} x {height} start {tracks:,} tracks (max_points "
        f"{max_points}, new ones as points are lost)",
        "cpu",
    )
    xy = torch.full((frames, tracks, 2), -1.0)
    visible = torch.zeros(frames, tracks, dtype=torch.bool)
    at = (torch.from_numpy(frame), torch.from_numpy(track))
    xy[at] = torch.from_numpy(positions)
    visible[at] = True
    return xy, visible, tracks_json(positions, frame, track, frames, tracks)
