"""Images of series (parsed by inputs.series and inputs.audio into one padded batch): one or several
series per image, as lines (optionally filled under) or bars, composited over an opaque or transparent
background."""

from __future__ import annotations

import math

import torch

from ..core.batching import Ragged
from ..core.device import check_memory, memory_budget, numba_usable, run_chunked
from ..inputs.series import VALUE_LIMIT
from .compositor import straight_alpha
from .line_plots import fill_coverage, render_polylines, series_points, stroke_inset, value_range

# Bars fill their slot of the plot's width but for a gap of this fraction, so that neighbours stay apart.
BAR_GAP = 0.2
# Memory model of render_series beside its outputs (bytes, fitted to peaks measured on the CPU: within
# 2x of them, tests/test_memory_estimates.py): per pixel of an image and per layer drawn on it, per
# pixel whatever its layers; and on the path that sets up every segment of a chunk at once (anti-aliased
# lines without numba's loop: draw's tile pairs), per pixel and per series value; per value on every
# path (points, segments).
PIXEL_LAYER_BYTES = 8
PIXEL_BYTES = 12
SEGMENT_PIXEL_BYTES = 48
VALUE_BYTES = 45_000
STEP_BYTES = 400
# Work of one chunk of images, in pixel-layers plus values weighted by VALUE_WORK: ~0.3 s on a 2-core
# CPU, so that interrupts (checked between chunks) stop a job within a second or two.
CHUNK_WORK = 1 << 23
VALUE_WORK = 64


def _bar_coverage(
    points: torch.Tensor, lengths: torch.Tensor, height: int, width: int, antialiased: bool
) -> torch.Tensor:
    """Coverage float [N,H,W] of bars (points [N,T,2] from series_points): value k of a series of n
    fills slot [k W/n, (k+1) W/n) but for BAR_GAP of it, from its y up to the bottom edge. Bars
    narrower than a pixel (n > W) are a filled area instead: each column full up to the highest of
    the bars whose slot centres fall in it."""
    slot = width / lengths.clamp_min(1)[:, None].to(points.dtype)  # [N,1]
    column = torch.arange(width, device=points.device, dtype=points.dtype)[None]
    value = ((column + 0.5) / slot).floor().long().clamp(0, points.shape[1] - 1)  # the bar at each column
    left = value * slot + slot * (BAR_GAP / 2)
    right = left + slot * (1 - BAR_GAP)
    if antialiased:
        across = ((column + 1).minimum(right) - column.maximum(left)).clamp(0, 1)
    else:
        across = ((column + 0.5 >= left) & (column + 0.5 < right)).to(points.dtype)
    top = points[..., 1].gather(1, value)
    # narrow bars (all of them computed: deciding on the host would be a sync)
    narrow = slot < 1
    centre = ((torch.arange(points.shape[1], device=points.device) + 0.5) * slot).long().clamp_max(width - 1)
    highest = torch.full((points.shape[0], width), math.inf, device=points.device).scatter_reduce_(
        1, centre, points[..., 1].nan_to_num(math.inf), "amin"
    )  # the smallest y: the highest bar, inf over gaps
    top = torch.where(narrow, highest.masked_fill_(highest == math.inf, math.nan), top)
    across = torch.where(narrow, torch.ones_like(across), across)
    top = top[:, None]  # [N,1,W]; NaN over gaps
    row = torch.arange(height, device=points.device, dtype=points.dtype)[None, :, None]
    down = (row + 1 - top).clamp(0, 1) if antialiased else (row + 0.5 >= top).to(points.dtype)
    return torch.nan_to_num(down * across[:, None], nan=0.0)


# Up to this many layers (inks) an image's layers are blended one after another, a few passes over
# the images each, where the product over all layers takes about 15 (500 plots of 224x224 on the
# CPU: 0.5-0.7 s, was 0.9-1.4 s, in turns on a noisy VM); above it, the product's fixed number of
# operations (overlays of many series).
FEW_LAYERS = 4


def render_series(
    data: Ragged,
    height: int,
    width: int,
    per_image: int = 1,
    style: str = "line",
    mode: str = "antialiased",
    line_width: float = 2.0,
    scale: str = "per_image",
    colors=((1.0, 1.0, 1.0, 1.0),),
    fill_colors=None,
    background=(0.0, 0.0, 0.0, 1.0),
    device=None,
    on_progress=None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Images of B = N / per_image plots: image b shows series b*K .. b*K+K-1 of data (Ragged y values
    [N,T], K = per_image) over each other, series k in colors[k] (RGBA, K of them), later ones on top.
    style "line": render_polylines' lines (mode, line_width), over the area under each in fill_colors[k]
    (RGBA, or None: no fill; every area under every line); "bars": one bar per value in colors[k].
    scale: min-max over each image's series, or over all ("shared"): the lowest at the bottom, the
    highest at the top (a line's extremes and ends inset by half its stroke, stroke_inset, so that it
    shows whole; bars' at the row centres).
    background RGBA: opaque gives RGB images, else RGBA in straight alpha (ComfyUI's convention).
    Returns images float32 [B,H,W,3|4] and alpha float32 [B,H,W] (the ink's opacity, background not
    counted), on the device of data; rendered on `device` (default: the same) in memory-sized chunks."""
    if style not in ("line", "bars"):
        raise ValueError(f"style: expected 'line' or 'bars', got {style!r}")
    if scale not in ("per_image", "shared"):
        raise ValueError(f"scale: expected 'per_image' or 'shared', got {scale!r}")
    if mode not in ("aliased", "antialiased"):
        raise ValueError(f"mode: expected 'aliased' or 'antialiased', got {mode!r}")
    count = data.batch
    if per_image < 1 or count % per_image:
        raise ValueError(f"per_image: {count} series do not make images of {per_image} each")
    batch = count // per_image
    home = data.values.device
    device = torch.device(device) if device is not None else home
    for name, given in (("colors", colors), ("fill_colors", fill_colors)):
        if given is not None and len(given) != per_image:
            raise ValueError(f"{name}: expected {per_image} colours (one per series of an image), got {len(given)}")
    ink = [tuple(c) for c in colors]
    if fill_colors is not None and style == "line":
        ink = [tuple(c) for c in fill_colors] + ink  # every area under every line
    opaque = background[3] >= 1
    steps = data.values.shape[1]
    values_drawn = style == "line" and mode == "antialiased" and not numba_usable(device)
    least, _peak, limit = series_memory(
        batch, steps, height, width, per_image, len(ink), 3 if opaque else 4, values_drawn, device
    )
    check_memory(least, f"series: {batch:,} plots of {height} x {width} ({per_image * steps:,} values each)", device)
    lengths = data.lengths.to(home)
    values = data.values.float()
    values = torch.where(values.isinf(), values, values.clamp(-VALUE_LIMIT, VALUE_LIMIT))  # finite stay finite
    inset = stroke_inset(mode, line_width) if style == "line" else 0.5  # bars have no stroke to keep whole
    points = series_points(values, lengths, *value_range(values, lengths, scale, per_image), height, width, inset)
    antialiased = mode == "antialiased"
    # the layers' colours and the background's, moved to the device once: [M+1,4]
    palette = torch.tensor(ink + [tuple(background)], dtype=torch.float32, device=home)
    images = torch.empty(batch, height, width, 3 if opaque else 4, device=home)
    alpha = torch.empty(batch, height, width, device=home)

    def composite(start, stop, dev):
        rows = slice(start * per_image, stop * per_image)
        on = lambda t: t[rows].to(dev)  # noqa: E731
        if style == "bars":
            coverage = _bar_coverage(on(points), on(lengths), height, width, antialiased)
        else:  # pixel xy, scaled above over each image's series; interrupts checked within its chunks too
            inner = None if on_progress is None else (lambda done, total: on_progress(start, batch))
            coverage = render_polylines(
                on(points), height, width, on(lengths), mode=mode, line_width=line_width, on_progress=inner
            )
        coverage = coverage.view(stop - start, per_image, height, width)
        if len(ink) > per_image:
            under = fill_coverage(on(points), on(lengths), height, width, antialiased, inset)
            coverage = torch.cat([under.view_as(coverage), coverage], 1)
        layers, behind_colour = palette[:-1].to(dev), palette[-1].to(dev)
        opacity = coverage * layers[:, 3, None, None]  # [b,M,H,W], bottom layer first
        into = None  # the output slice the colour was blended straight into
        if len(ink) <= FEW_LAYERS:  # source-over one layer at a time on the premultiplied background
            colour = (behind_colour[:3] * behind_colour[3]).expand(stop - start, height, width, 3)
            covered = opacity[:, 0]
            for m in range(len(ink)):
                # the top layer's blend straight into the output where that is the result
                into = images[start:stop] if m == len(ink) - 1 and opaque and dev == home else None
                colour = torch.lerp(colour, layers[m, :3].expand_as(colour), opacity[:, m, ..., None], out=into)
                if m:
                    covered = torch.lerp(covered, covered.new_ones(()), opacity[:, m])
            behind = ((1 - covered) * behind_colour[3])[..., None]
        else:  # each layer shows its opacity times what the layers above let through: a fixed op count
            through = (1 - opacity).flip(1).cumprod(1).flip(1)  # [b,M,H,W]: layers m.. together
            shown = opacity * torch.cat([through[:, 1:], torch.ones_like(through[:, :1])], 1)
            covered = shown.sum(1)
            colour = torch.einsum("bmhw,mc->bhwc", shown, layers[:, :3])
            behind = through[:, 0, ..., None] * behind_colour[3]
            colour = colour + behind * behind_colour[:3]
        if not opaque:
            colour = straight_alpha(torch.cat([colour, covered[..., None] + behind], -1))
        if into is None:
            images[start:stop] = colour.to(home)
        alpha[start:stop] = covered.to(home)

    run_chunked(composite, batch, 1, device, on_progress, limit=limit)  # limit: sized by memory and work
    return images, alpha


def series_memory(
    batch: int,
    steps: int,
    height: int,
    width: int,
    per_image: int,
    layers: int,
    channels: int,
    values_drawn: bool,
    device,
) -> tuple[int, int, int]:
    """render_series' memory in bytes, for `batch` images of height x width x channels (and their alpha)
    of per_image series of `steps` values each, `layers` inks (lines and fills), values_drawn when every
    segment of a chunk is set up at once (see VALUE_BYTES): (the least it can run in: the outputs and one
    image's work, its expected peak, the images a chunk takes). Chunks hold about CHUNK_WORK and fit
    beside the outputs in memory_budget(device)."""
    outputs = batch * height * width * (channels + 1) * 4 + batch * per_image * steps * 16  # and the points
    item = height * width * (PIXEL_LAYER_BYTES * layers + PIXEL_BYTES) + per_image * steps * STEP_BYTES
    if values_drawn:
        item += height * width * SEGMENT_PIXEL_BYTES + per_image * steps * VALUE_BYTES
    work = per_image * (height * width * layers + (steps * VALUE_WORK if values_drawn else 0))
    limit = max(1, min(batch, CHUNK_WORK // max(1, work), (memory_budget(device) - outputs) // item))
    return outputs + item, outputs + limit * item, limit
