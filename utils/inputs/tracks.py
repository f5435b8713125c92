"""Tracked points in every format of DESIGN.md, as padded xy [T,N,2] and visible [T,N]: the pack's
RASTERKIT_TRACKS, core ComfyUI's TRACKS (the WanMove nodes'), ys-vision-tools' TRACKS and tracks_json;
with the tracks' text labels where the format gives them (Labels). to_core_tracks goes the other way."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import torch

from ..core.batching import pack
from .text import coordinates, load_json, short, text_limit


@dataclass
class Labels:
    """Text labels of tracked points: names, the distinct label strings, and index int64 [T,N], the
    name of each point in each frame (-1: none given)."""

    names: list[str]
    index: torch.Tensor

    @staticmethod
    def none(frames: int, n: int) -> Labels:
        return Labels([], torch.full((frames, n), -1, dtype=torch.int64))


def parse_point(item, where: str, input_name: str) -> tuple[float, float]:
    """A point {"x": .., "y": ..} or [x, y] as finite floats; a ValueError naming input_name and where."""
    try:
        x, y = (item["x"], item["y"]) if isinstance(item, dict) else item
    except (KeyError, TypeError, ValueError):
        raise ValueError(f'{input_name}: {where} should be {{"x": .., "y": ..}} or [x, y], got {short(item)}') from None
    x, y = coordinates((x, y), where, input_name)
    return x, y


def _is_point(item) -> bool:
    return isinstance(item, dict) or (
        isinstance(item, (list, tuple)) and len(item) == 2 and all(isinstance(v, (int, float)) for v in item)
    )


def _label(item, where: str, input_name: str) -> str | None:
    """The "label" of a {"x","y"} point (None: it has none, or null)."""
    label = item.get("label") if isinstance(item, dict) else None
    if label is not None and not isinstance(label, str):
        raise ValueError(f"{input_name}: {where} label should be a string, got {short(label)}")
    if label is not None and len(label) > text_limit("label"):
        raise ValueError(
            f"{input_name}: {where} label has {len(label):,} characters ({short(label, 40)}); at most "
            f"{text_limit('label'):,} are drawn"
        )
    return label


def _held_labels(per_track: list[list[str | None]], frames: int) -> Labels:
    """Labels of tracks from their points' labels (None: none given): a label names its track from
    its point's frame on, until the next one; frames before the first name take the first; a track
    shorter than the batch holds its last label, as its last point."""
    names = sorted({label for track in per_track for label in track if label is not None})
    labels = Labels(names, torch.full((frames, len(per_track)), -1, dtype=torch.int64))
    if not names:
        return labels
    number = {name: i for i, name in enumerate(names)}
    index = labels.index.numpy()  # shares its memory
    for n, track in enumerate(per_track):  # host lists, read once (as their points)
        given = np.array([-1 if label is None else number[label] for label in track[:frames]])
        named = np.flatnonzero(given >= 0)
        if not named.size:
            continue
        latest = np.maximum.accumulate(np.where(given >= 0, np.arange(len(given)), -1))  # the last named frame
        index[: len(given), n] = given[np.where(latest >= 0, latest, named[0])]
        index[len(given) :, n] = index[len(given) - 1, n]
    return labels


def from_json(text: str, frames: int, input_name: str = "tracks_json") -> tuple[torch.Tensor, torch.Tensor]:
    """xy float32 [T,N,2] and visible bool [T,N] for a batch of `frames` from:
    a list of tracks, each a list of per-frame points ({"x","y"} or [x, y]); a list of per-track
    JSON strings (CoTracker); or a flat list of points, which is ONE track over frames (point t at
    frame t, as KJNodes' coordinates: one {"x","y"} per frame).
    Points at negative coordinates are invisible; a track shorter than the batch holds its last
    point, a longer one is cut. labelled_json gives the points' labels too."""
    return labelled_json(text, frames, input_name)[:2]


def labelled_json(
    text: str, frames: int | None, input_name: str = "tracks_json"
) -> tuple[torch.Tensor, torch.Tensor, Labels]:
    """from_json's xy and visible, and the tracks' Labels: a {"x","y"} point may carry a "label"
    string, which names its track from that frame on (and before it, when it is the track's first);
    tracks without one have none. frames None: the longest track's length (1 without tracks)."""
    text = (text or "").strip()
    if not text:
        frames = frames or 1
        return torch.zeros(frames, 0, 2), torch.zeros(frames, 0, dtype=torch.bool), Labels.none(frames, 0)
    data = load_json(text, input_name, single_quotes=True)
    if not isinstance(data, list):
        raise ValueError(f"{input_name}: expected a list of tracks or of points, got {short(data)}")
    if data and all(isinstance(item, str) for item in data):
        data = [
            load_json(item, f"{input_name}: track {n}", single_quotes=True) for n, item in enumerate(data)
        ]  # CoTracker
    if data and all(_is_point(item) for item in data):
        data = [data]  # KJNodes: one moving point
    tracks, labels = [], []
    for n, track in enumerate(data):
        if not isinstance(track, list) or not track:
            raise ValueError(f"{input_name}: track {n} should be a non-empty list of points, got {short(track)}")
        tracks.append([parse_point(p, f"track {n} point {t}", input_name) for t, p in enumerate(track)])
        labels.append([_label(p, f"track {n} point {t}", input_name) for t, p in enumerate(track)])
    if frames is None:
        frames = max(map(len, tracks), default=1)
    return (*from_lists(tracks, frames), _held_labels(labels, frames))


def from_lists(tracks: list[list[tuple[float, float]]], frames: int) -> tuple[torch.Tensor, torch.Tensor]:
    xy = np.zeros((frames, len(tracks), 2), np.float32)
    for n, track in enumerate(tracks):  # per-track copies on the host, before one tensor is made
        points = np.asarray(track[:frames], np.float32)
        xy[: len(points), n] = points
        xy[len(points) :, n] = points[-1]
    xy = torch.from_numpy(xy)
    return xy, (xy >= 0).all(-1)


def from_tracks(tracks, frames: int, input_name: str = "tracks") -> tuple[torch.Tensor, torch.Tensor]:
    """RASTERKIT_TRACKS: {"xy": float [T,N,2], "visible": bool [T,N]}, fitted to `frames`."""
    return labelled_tracks(tracks, frames, input_name)[:2]


def labelled_tracks(
    tracks, frames: int | None, input_name: str = "tracks"
) -> tuple[torch.Tensor, torch.Tensor, Labels]:
    """from_tracks' xy and visible, and the Labels of the optional "labels" entry of RASTERKIT_TRACKS: a
    list of N strings (None: a track without one), one per track for every frame (frames None: T)."""
    if isinstance(tracks, (np.ndarray, list, tuple)):
        raise ValueError(
            f"{input_name}: got {type(tracks).__name__}, ys-vision-tools' TRACKS (arrays of x, y): "
            f"connect it to ys_tracks"
        )
    if isinstance(tracks, dict) and "track_path" in tracks:
        raise ValueError(f"{input_name}: got core ComfyUI TRACKS (track_path): connect it to ys_tracks")
    try:
        xy = torch.as_tensor(tracks["xy"], dtype=torch.float32)
        visible = torch.as_tensor(tracks["visible"], dtype=torch.bool)
    except (TypeError, KeyError, IndexError, ValueError, RuntimeError):
        raise ValueError(
            f"{input_name}: expected RASTERKIT_TRACKS, a dict with xy [T,N,2] and visible [T,N], got {short(tracks)}"
        ) from None
    if xy.ndim != 3 or xy.shape[-1] != 2 or visible.shape != xy.shape[:2] or xy.shape[0] == 0:
        raise ValueError(
            f"{input_name}: xy {tuple(xy.shape)} and visible {tuple(visible.shape)} "
            f"should be [T,N,2] and [T,N] with T > 0"
        )
    n, frames = xy.shape[1], xy.shape[0] if frames is None else frames
    names = tracks.get("labels") if isinstance(tracks, dict) else None
    if names is None:
        return (*_fitted(xy, visible, frames), Labels.none(frames, n))
    if not isinstance(names, (list, tuple)) or len(names) != n:
        raise ValueError(f"{input_name}: labels should be a list of {n} strings, one per track, got {short(names)}")
    for i, name in enumerate(names):
        if name is not None and not isinstance(name, str):
            raise ValueError(f"{input_name}: label {i} should be a string, got {short(name)}")
        if name is not None and len(name) > text_limit("label"):
            raise ValueError(
                f"{input_name}: label {i} has {len(name):,} characters; at most {text_limit('label'):,} are drawn"
            )
    return (*_fitted(xy, visible, frames), _held_labels([[name] for name in names], frames))


def from_ys_tracks(tracks, frames: int | None, input_name: str = "ys_tracks") -> tuple[torch.Tensor, torch.Tensor]:
    """ys-vision-tools' TRACKS: one array [N,2] of x, y (one frame: the same points on every frame), or
    a list of per-frame arrays [N_t,2] whose N_t may change. ys-vision-tools detects points per frame
    and gives them no ids, so point n is row n of every frame; a frame with fewer rows hides the rest.
    Empty arrays are frames without points; NaN, infinite and negative coordinates are hidden. A list
    shorter than the batch holds its last frame (as ys-vision-tools' Track Merge), a longer one is cut.
    frames None: the list's length (1 for one array)."""
    listed = isinstance(tracks, (list, tuple))
    arrays = []
    for t, points in enumerate(tracks[:frames] if listed else [tracks]):  # host objects, read once per frame
        expected = (
            f"{input_name}: frame {t} should be an array [N,2] of x, y"
            if listed
            else f"{input_name}: expected an array [N,2] of x, y or a list of them, one per frame"
        )
        try:
            points = np.asarray(points, np.float32)
        except (TypeError, ValueError):
            raise ValueError(f"{expected}, got {short(points)}") from None
        if points.size and (points.ndim != 2 or points.shape[1] != 2):
            raise ValueError(f"{expected}, got shape {points.shape}")
        arrays.append(points.reshape(-1, 2))
    frames = (len(arrays) or 1) if frames is None else frames
    if not arrays:
        return torch.zeros(frames, 0, 2), torch.zeros(frames, 0, dtype=torch.bool)
    rows = pack(arrays, (2,), pad_value=-1.0)
    return _fitted(rows.values, rows.mask(), frames)


def from_core_tracks(
    tracks: dict, frames: int | None, input_name: str = "ys_tracks"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Core ComfyUI's TRACKS (comfy_api io.Tracks, the WanMove nodes'): {"track_path": float [T,N,2] in
    pixels, "track_visibility": bool [T,N]}, visibility optional (all visible, as WanMoveTrackToVideo
    reads it) and [T,1] allowed (GenerateTracks' track_mask: one flag per frame for every track). On any
    device; NaN, infinite and negative points are hidden. Fitted to `frames` (None: T) as the others."""
    try:
        xy = torch.as_tensor(tracks["track_path"]).detach().to("cpu", torch.float32)
        given = tracks.get("track_visibility")
        visible = None if given is None else torch.as_tensor(given).detach().to("cpu") != 0
    except (TypeError, ValueError, RuntimeError):
        raise ValueError(
            f"{input_name}: core TRACKS should hold tensors track_path [T,N,2] and track_visibility [T,N], "
            f"got {short(tracks)}"
        ) from None
    if xy.ndim != 3 or xy.shape[-1] != 2 or xy.shape[0] == 0:
        raise ValueError(f"{input_name}: core TRACKS' track_path should be [T,N,2] with T > 0, got {tuple(xy.shape)}")
    if visible is None:
        visible = torch.ones(xy.shape[:2], dtype=torch.bool)
    if visible.ndim != 2 or visible.shape[0] != xy.shape[0] or visible.shape[1] not in (1, xy.shape[1]):
        raise ValueError(
            f"{input_name}: core TRACKS' track_visibility {tuple(visible.shape)} should be [T,N] or [T,1] "
            f"for track_path {tuple(xy.shape)}"
        )
    return _fitted(xy, visible.expand(xy.shape[:2]), xy.shape[0] if frames is None else frames)


TRACKS_ACCEPTED = (
    "core ComfyUI TRACKS (a dict with track_path [T,N,2] and track_visibility [T,N], from the WanMove nodes) "
    "or ys-vision-tools' TRACKS (an array [N,2] of x, y, or a list of them, one per frame)"
)


def from_tracks_socket(value, frames: int | None, input_name: str = "ys_tracks") -> tuple[torch.Tensor, torch.Tensor]:
    """A TRACKS socket's value, which two packs define: core ComfyUI's (a dict with track_path) or
    ys-vision-tools' (arrays of x, y), told apart by their contents (from_core_tracks, from_ys_tracks)."""
    if isinstance(value, dict) and "track_path" in value:
        return from_core_tracks(value, frames, input_name)
    if isinstance(value, (np.ndarray, torch.Tensor, list, tuple)):
        return from_ys_tracks(value, frames, input_name)
    raise ValueError(f"{input_name}: expected {TRACKS_ACCEPTED}, got {short(value)}")


def to_core_tracks(xy: torch.Tensor, visible: torch.Tensor) -> dict:
    """Core ComfyUI's TRACKS of xy float [T,N,2] and visible bool [T,N], for WanMove: track_path float32
    [T,N,2] and track_visibility bool [T,N], on the CPU. A hidden point sits where its track was last
    seen (before it is first seen: where it is), never at (-1, -1) or (-100, -100): WanMove's preview
    draws the path through every point. Tracks never seen are dropped."""
    xy, visible = xy.detach().to("cpu", torch.float32), visible.detach().to("cpu", torch.bool)
    seen = visible.any(0)
    xy, visible = xy[:, seen], visible[:, seen]
    steps = torch.arange(xy.shape[0])[:, None]
    last = torch.cummax(torch.where(visible, steps, -1), 0).values  # the last frame seen, -1: not yet
    first = torch.where(visible, steps, xy.shape[0]).amin(0, keepdim=True)
    source = torch.where(last >= 0, last, first)
    return {"track_path": xy.gather(0, source[..., None].expand_as(xy)).contiguous(), "track_visibility": visible}


def _fitted(xy: torch.Tensor, visible: torch.Tensor, frames: int) -> tuple[torch.Tensor, torch.Tensor]:
    """xy [T,N,2] and visible [T,N] with non-finite and negative points hidden, cut or held (the last
    frame) to `frames`."""
    # finite and >= 0: non-finite values made -1 first
    xy = torch.nan_to_num(xy, nan=-1.0, posinf=-1.0, neginf=-1.0)
    visible = visible & (xy >= 0).all(-1)
    if xy.shape[0] < frames:  # hold the last frame
        extra = frames - xy.shape[0]
        xy = torch.cat([xy, xy[-1:].expand(extra, -1, -1)])
        visible = torch.cat([visible, visible[-1:].expand(extra, -1)])
    return xy[:frames].contiguous(), visible[:frames].contiguous()


def to_json(xy: torch.Tensor, visible: torch.Tensor) -> str:
    """tracks_json: one list per track of per-frame {"x","y"} (invisible points at -100, -100)."""
    points = torch.where(visible[..., None], xy, torch.tensor(-100.0)).round(decimals=2)
    return json.dumps([[{"x": x, "y": y} for x, y in track] for track in points.transpose(0, 1).tolist()])


def track_points(
    frames: int | None, tracks=None, ys_tracks=None, tracks_json: str = "", names=("tracks", "ys_tracks")
) -> tuple[torch.Tensor, torch.Tensor, Labels]:
    """The Line Link Renderer's track source for `frames` frames (None: the source's own length) as xy
    float [T,N,2], visible bool [T,N] and the tracks' Labels: the connected socket (RASTERKIT_TRACKS on
    tracks, core ComfyUI's or ys-vision-tools' TRACKS on ys_tracks), else the tracks_json text (a
    connected socket wins over the text, so that its default never blocks a connection; empty text and
    no socket: no points). names: the node's names of the two sockets, for errors."""
    if tracks is not None and ys_tracks is not None:
        raise ValueError(f"{names[0]}: connect one of {names[0]} and {names[1]}, got both")
    if tracks is not None:
        return labelled_tracks(tracks, frames, names[0])
    if ys_tracks is not None:
        xy, visible = from_tracks_socket(ys_tracks, frames, names[1])
        return xy, visible, Labels.none(xy.shape[0], xy.shape[1])
    return labelled_json(tracks_json, frames)
