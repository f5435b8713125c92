"""Series for line plots from text (JSON or CSV) or from audio, as one padded batch."""
from __future__ import annotations

import csv
import io
import math

import torch

from .batching import Ragged, pack
from .text_input import check_size, load_json


# More values than this per plot cost memory (anti-aliased lines: ~40 KB per value) without a visible
# difference: a plot is at most 8192 px wide. Audio windows longer than this are reduced to their envelope.
MAX_SERIES_VALUES = 65_536


def _number(value, where: str, input_name: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{input_name}: {where} is not a number: {value!r}") from None
    if math.isinf(number):
        raise ValueError(f"{input_name}: {where} is infinite; use null or NaN for a gap")
    return number


def from_text(text: str, orientation: str = "rows", input_name: str = "series") -> Ragged:
    """JSON (a list of numbers: one series; a list of lists: one series each; null = NaN = gap)
    or CSV (numbers; one series per row, or per column with orientation "columns"; a header row
    of names is skipped; empty cells are gaps). Returns Ragged values [B,T] float32."""
    text = (text or "").strip()
    if not text:
        raise ValueError(f"{input_name}: empty; give JSON such as [[1, 2, 3], [3, 1, 2]] or CSV rows, or connect audio")
    if text[0] in "[{":
        data = load_json(text, input_name)
        if not isinstance(data, list):
            raise ValueError(f"{input_name}: expected a list of numbers or a list of lists, got {type(data).__name__}")
        if all(not isinstance(item, list) for item in data):
            data = [data]
        rows = []
        for i, item in enumerate(data):
            if not isinstance(item, list):
                raise ValueError(f"{input_name}: series {i} is not a list: {item!r}")
            rows.append([math.nan if v is None else _number(v, f"series {i} value {j}", input_name)
                         for j, v in enumerate(item)])
    else:
        check_size(text, input_name)
        table = [row for row in csv.reader(io.StringIO(text)) if any(cell.strip() for cell in row)]
        if table and not _is_numeric_row(table[0]):
            table = table[1:]  # header
        cells = [[math.nan if not cell.strip() else _number(cell, f"row {r + 1}, column {c + 1}", input_name)
                  for c, cell in enumerate(row)] for r, row in enumerate(table)]
        if orientation == "columns":
            width = max((len(row) for row in cells), default=0)
            cells = [[row[c] for row in cells if c < len(row)] for c in range(width)]
        rows = cells
    if not rows:
        raise ValueError(f"{input_name}: no series found")
    longest = max(range(len(rows)), key=lambda i: len(rows[i]))
    if len(rows[longest]) > MAX_SERIES_VALUES:
        raise ValueError(f"{input_name}: series {longest} has {len(rows[longest]):,} values; at most "
                         f"{MAX_SERIES_VALUES:,} per series are plotted (resample it first, or connect it as audio)")
    return pack([row or [math.nan] for row in rows])  # an empty series is one gap: a blank image


def _is_numeric_row(row) -> bool:
    try:
        [float(cell) for cell in row if cell.strip()]
    except ValueError:
        return False
    return True


def from_audio(audio, frames: int, input_name: str = "audio") -> Ragged:
    """ComfyUI AUDIO {"waveform": [B,C,S], "sample_rate"}: the first clip, channels averaged,
    cut into `frames` equal windows, one series each (an audio-reactive video, one frame per window)."""
    try:
        waveform = audio["waveform"]
    except (TypeError, KeyError):
        raise ValueError(f"{input_name}: expected ComfyUI AUDIO, a dict with a 'waveform' tensor [B,C,S]") from None
    if not isinstance(waveform, torch.Tensor) or waveform.ndim != 3:
        raise ValueError(f"{input_name}: waveform must be a tensor [B,C,S], got {getattr(waveform, 'shape', waveform)!r}")
    if frames < 1:
        raise ValueError(f"frames: expected at least 1 window, got {frames!r}")
    samples = waveform.shape[-1]
    if waveform.shape[0] == 0 or waveform.shape[1] == 0:
        raise ValueError(f"{input_name}: the waveform holds no clip or no channel: shape {tuple(waveform.shape)}")
    if samples < 2 * frames:
        raise ValueError(f"{input_name}: {samples} samples cannot make {frames} frames of at least 2 samples")
    mono = torch.nan_to_num(waveform[0].float().mean(0))
    window = samples // frames
    values = mono[: window * frames].reshape(frames, window)
    if window > MAX_SERIES_VALUES:  # the envelope: minimum and maximum of each of MAX/2 runs of samples
        runs = MAX_SERIES_VALUES // 2
        run = window // runs
        grouped = values[:, : runs * run].reshape(frames, runs, run)
        values = torch.stack([grouped.amin(-1), grouped.amax(-1)], -1).reshape(frames, 2 * runs)
    return Ragged(values, torch.full((frames,), values.shape[1], dtype=torch.long))
