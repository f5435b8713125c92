"""Images of series (parsed by inputs.series and inputs.audio into one padded batch): one or several
series per image, as lines (optionally filled under) or bars (straight or around a circle, mirrored or
reflected, colour gradients, falling peak caps), composited over an opaque or transparent background;
and spectrograms (time x frequency images in a colour map)."""

from __future__ import annotations

import math
from dataclasses import dataclass

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
# path (points, segments); per pixel-layer more for bars in a Look (angles, sides, caps).
PIXEL_LAYER_BYTES = 8
PIXEL_BYTES = 12
SEGMENT_PIXEL_BYTES = 48
VALUE_BYTES = 45_000
STEP_BYTES = 400
STYLED_PIXEL_BYTES = 32
# Work of one chunk of images, in pixel-layers plus values weighted by VALUE_WORK: ~0.3 s on a 2-core
# CPU, so that interrupts (checked between chunks) stop a job within a second or two.
CHUNK_WORK = 1 << 23
VALUE_WORK = 64


# Bar looks (Look): the radial layout's hole, a fraction of its outer radius (half the smaller side); a
# reflection's share of the plot below the bars' baseline, and its opacity at the baseline (fading to
# none at the far end); a peak cap's thickness in pixels.
RADIAL_HOLE = 0.4
REFLECTION_SHARE = 1 / 3
REFLECTION_OPACITY = 0.5
CAP_PIXELS = 2.0
LAYOUTS = ("linear", "radial")
# Spectrograms colour each pixel by one lookup in the colour map sampled at this many places (a 10-bit
# output: finer than an 8-bit image can show).
SPECTROGRAM_LEVELS = 1024
MIRRORS = ("none", "centre", "reflection")


@dataclass(frozen=True)
class Look:
    """How render_series draws bars (the defaults: plain bars). layout "radial": around a circle, value
    k of n at angle 2 pi (k + 1/2) / n clockwise from the top (n: the batch's padded count of values),
    standing on a circle of RADIAL_HOLE times the outer radius (half the smaller side) and reaching out
    to it at most. mirror "centre": bars grow
    both ways from the middle line (radial: the middle circle); "reflection": bars on a baseline at
    REFLECTION_SHARE of the plot and below it their mirror image, fading from REFLECTION_OPACITY.
    gradient: RGBA stops along each bar from its base to its full length (lines: up the plot),
    replacing the ink colours (() : none). peak_fall > 0: a cap CAP_PIXELS thick at each bar's peak over
    the images so far, falling this fraction of a bar's full length per image (frame)."""

    layout: str = "linear"
    mirror: str = "none"
    gradient: tuple = ()
    peak_fall: float = 0.0

    def check(self) -> None:
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout: expected one of {', '.join(LAYOUTS)}, got {self.layout!r}")
        if self.mirror not in MIRRORS:
            raise ValueError(f"mirror: expected one of {', '.join(MIRRORS)}, got {self.mirror!r}")
        if not (math.isfinite(self.peak_fall) and self.peak_fall >= 0):
            raise ValueError(f"peak_fall: expected a fraction >= 0 of the plot per frame, got {self.peak_fall!r}")

    @property
    def styled(self) -> bool:
        """Whether bars need the styled path (the plain one draws them as before)."""
        return self.layout != "linear" or self.mirror != "none" or self.peak_fall > 0


def _bar_coverage(
    points: torch.Tensor, lengths: torch.Tensor, height: int, width: int, antialiased: bool
) -> torch.Tensor:
    """Coverage float [N,H,W] of bars (points [N,T,2] from series_points): value k of a series of n
    fills slot [k W/n, (k+1) W/n) but for BAR_GAP of it, from its y up to the bottom edge. Bars
    narrower than a pixel (n > W) are a filled area instead: each column full up to the highest of
    the bars whose slot centres fall in it."""
    across, top, _ = _bar_columns(points[..., 1], lengths, width, antialiased)
    top = top[:, None]  # [N,1,W]; NaN over gaps
    row = torch.arange(height, device=points.device, dtype=points.dtype)[None, :, None]
    down = (row + 1 - top).clamp(0, 1) if antialiased else (row + 0.5 >= top).to(points.dtype)
    return torch.nan_to_num(down * across[:, None], nan=0.0)


def _bar_columns(
    y: torch.Tensor, lengths: torch.Tensor, width: int, antialiased: bool, peaks: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Per pixel column of bars with tops y [N,T] (pixels): (the coverage across the column float
    [N,W], the top of its bar [N,W] (NaN over gaps), and of peaks [N,T] (fractions) the column's, or
    None). Narrow bars (slots under a pixel): the highest top and peak of the bars centred in it."""
    slot = width / lengths.clamp_min(1)[:, None].to(y.dtype)  # [N,1]
    column = torch.arange(width, device=y.device, dtype=y.dtype)[None]
    value = ((column + 0.5) / slot).floor().long().clamp(0, y.shape[1] - 1)  # the bar at each column
    left = value * slot + slot * (BAR_GAP / 2)
    right = left + slot * (1 - BAR_GAP)
    if antialiased:
        across = ((column + 1).minimum(right) - column.maximum(left)).clamp(0, 1)
    else:
        across = ((column + 0.5 >= left) & (column + 0.5 < right)).to(y.dtype)
    top = y.gather(1, value)
    # narrow bars (all of them computed: deciding on the host would be a sync)
    narrow = slot < 1
    centre = ((torch.arange(y.shape[1], device=y.device) + 0.5) * slot).long().clamp_max(width - 1)
    highest = torch.full((y.shape[0], width), math.inf, device=y.device).scatter_reduce_(
        1, centre, y.nan_to_num(math.inf), "amin"
    )  # the smallest y: the highest bar, inf over gaps
    top = torch.where(narrow, highest.masked_fill_(highest == math.inf, math.nan), top)
    across = torch.where(narrow, torch.ones_like(across), across)
    if peaks is not None:
        tallest = torch.full_like(top, -math.inf).scatter_reduce_(1, centre, peaks, "amax")
        peaks = torch.where(narrow, tallest, peaks.gather(1, value))
    return across, top, peaks


def _intervals(fraction, span: float, mirror: str, cap: float = 0.0) -> list:
    """The spans (low, high, faded) along bars of `fraction` of their full length `span` (pixels from
    the plot's base; fraction a tensor, low/high tensors like it or floats), or with cap > 0 of their
    caps that thick at that fraction; faded: the reflection's, to be multiplied by its fade."""
    if mirror == "none":
        tip = fraction * span
        return [(tip, tip + cap, False)] if cap else [(0.0, tip, False)]
    if mirror == "centre":
        middle, half = span / 2, fraction * (span / 2)
        if cap:
            return [(middle + half, middle + half + cap, False), (middle - half - cap, middle - half, False)]
        return [(middle - half, middle + half, False)]
    base = span * REFLECTION_SHARE
    tip = fraction * (span - base)
    if cap:
        return [(base + tip, base + tip + cap, False), (base - tip - cap, base - tip, True)]
    return [(base, base + tip, False), (base - tip, base, True)]


def _along(at: torch.Tensor, spans: list, fade: torch.Tensor, antialiased: bool, pick=None) -> torch.Tensor:
    """Coverage along bars of their spans (_intervals), at: each pixel's distance from the plot's base
    (less half a pixel when antialiased: then the coverage of [low, high] by a box filter one pixel wide,
    clamp(high - at) - clamp(low - at), exact); pick: each end per pixel (radial), else broadcast."""
    total = None
    for low, high, faded in spans:
        low, high = (low, high) if pick is None else (pick(low), pick(high))
        if antialiased:
            part = (high - at).clamp_(0, 1) - (low - at).clamp_(0, 1)
        else:
            part = ((at >= low) & (at <= high)).to(at.dtype)
        part = part * fade if faded else part
        total = part if total is None else total.add_(part)
    return total


def _radial_frame(height: int, width: int, count: int, device, antialiased: bool):
    """Polar layout of `count` bars about the image centre, value k clockwise from the top: each pixel's
    distance from the bars' base circle (float [H,W]), the value its angle falls on (int64 [H,W]), its
    coverage across that bar (float [H,W]: the box filter's on its distances from the bar's two sides,
    lines through the centre), and the bars' full length."""
    y = torch.arange(height, device=device, dtype=torch.float32)[:, None] + (0.5 - height / 2)
    x = torch.arange(width, device=device, dtype=torch.float32)[None] + (0.5 - width / 2)
    outer = min(height, width) / 2
    radius = torch.hypot(x, y)
    slot = torch.atan2(x, -y).remainder(2 * math.pi) * (count / (2 * math.pi))
    value = slot.floor().clamp_max(count - 1)
    offset = (slot - value - 0.5) * (2 * math.pi / count)  # radians from the bar's axis
    half = math.pi * (1 - BAR_GAP) / count
    if antialiased:
        near = radius * (half - offset).clamp(-math.pi / 2, math.pi / 2).sin()
        far = radius * (half + offset).clamp(-math.pi / 2, math.pi / 2).sin()
        across = (near + 0.5).clamp(0, 1) + (far + 0.5).clamp(0, 1) - 1
        across = across.clamp_min(0)
    else:
        across = (offset.abs() <= half).to(torch.float32)
    return radius - RADIAL_HOLE * outer, value.long(), across, (1 - RADIAL_HOLE) * outer


def _styled_bar_coverage(
    points: torch.Tensor,
    lengths: torch.Tensor,
    peaks: torch.Tensor | None,
    height: int,
    width: int,
    antialiased: bool,
    look: Look,
) -> torch.Tensor:
    """Coverage float [N,H,W] of bars in `look` (points [N,T,2] from series_points, a bar's length the
    fraction of the height its plain bar has; peaks [N,T] such fractions or None). Radial: the circle
    holds T slots (the padded count) for every series, so that its layout is computed once."""
    y = points[..., 1]
    if look.layout == "linear":
        across, top, peaks = _bar_columns(y, lengths, width, antialiased, peaks)
        fraction = ((height - top) / height).nan_to_num_(0.0)[:, None]  # [N,1,W]; gaps: no bar
        across, peaks = across[:, None], (None if peaks is None else peaks[:, None])
        distance = height - 0.5 - torch.arange(height, device=y.device, dtype=y.dtype)[None, :, None]
        span, pick = float(height), None
    else:
        distance, value, across, span = _radial_frame(height, width, y.shape[1], y.device, antialiased)
        fraction = ((height - y) / height).nan_to_num_(0.0)
        index = value.flatten()
        pick = lambda end: end if isinstance(end, float) else end[:, index].view(-1, height, width)  # noqa: E731
    at = distance - 0.5 if antialiased else distance
    fade = REFLECTION_OPACITY * (distance / (span * REFLECTION_SHARE)).clamp(0, 1)
    spans = _intervals(fraction, span, look.mirror)
    if peaks is not None:
        spans += _intervals(peaks, span, look.mirror, cap=CAP_PIXELS)
    along = _along(at, spans, fade, antialiased, pick)
    return (along.clamp_max_(1) if len(spans) > 1 else along).mul_(across)


def bar_peaks(points: torch.Tensor, height: int, per_image: int, fall: float) -> torch.Tensor:
    """Peak caps float [N,T] of bars (points [N,T,2] from series_points, N = B images x per_image): at
    each image, the highest of the bars so far (fractions of the height), each dropping `fall` per
    image since: max over s <= b of (bar[s] - fall (b - s)), one cumulative max over the images."""
    fraction = ((height - points[..., 1]) / height).nan_to_num(-math.inf).view(-1, per_image, points.shape[1])
    drop = fall * torch.arange(fraction.shape[0], device=points.device, dtype=points.dtype)[:, None, None]
    return (torch.cummax(fraction + drop, 0).values - drop).view(-1, points.shape[1])


def gradient_colours(stops: torch.Tensor, position: torch.Tensor) -> torch.Tensor:
    """RGBA float [...,4] at positions [...] in 0..1 along evenly spaced stops [S,4] (S >= 1)."""
    scaled = position.clamp(0, 1) * (stops.shape[0] - 1)
    left = scaled.floor().long().clamp(0, max(stops.shape[0] - 2, 0))
    right = (left + 1).clamp_max(stops.shape[0] - 1)
    return torch.lerp(stops[left], stops[right], (scaled - left)[..., None])


def _gradient_image(stops: torch.Tensor, height: int, width: int, look: Look, bars: bool) -> torch.Tensor:
    """RGBA float [H,W,4] of look.gradient (stops [S,4]) at each pixel: along the bars from their base
    (mirrored: from the middle or the baseline both ways), or up the plot (lines)."""
    device = stops.device
    if bars and look.layout == "radial":
        v, _, _, span = _radial_frame(height, width, 1, device, False)
    else:
        v = (height - 0.5 - torch.arange(height, device=device, dtype=torch.float32))[:, None].expand(height, width)
        span = float(height)
    if not bars or look.mirror == "none":
        position = v / span
    elif look.mirror == "centre":
        position = (v - span / 2).abs() / (span / 2)
    else:
        base = span * REFLECTION_SHARE
        position = (v - base).abs() / (span - base)
    return gradient_colours(stops, position)


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
    look: Look = Look(),
) -> tuple[torch.Tensor, torch.Tensor]:
    """Images of B = N / per_image plots: image b shows series b*K .. b*K+K-1 of data (Ragged y values
    [N,T], K = per_image) over each other, series k in colors[k] (RGBA, K of them), later ones on top.
    style "line": render_polylines' lines (mode, line_width), over the area under each in fill_colors[k]
    (RGBA, or None: no fill; every area under every line); "bars": one bar per value in colors[k], as
    `look` says (Look: layout, mirror, peak caps over the images, in order; its gradient colours lines too).
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
    look.check()
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
    styled = style == "bars" and look.styled
    least, _peak, limit = series_memory(
        batch, steps, height, width, per_image, len(ink), 3 if opaque else 4, values_drawn, device, styled
    )
    check_memory(least, f"series: {batch:,} plots of {height} x {width} ({per_image * steps:,} values each)", device)
    lengths = data.lengths.to(home)
    values = data.values.float()
    values = torch.where(values.isinf(), values, values.clamp(-VALUE_LIMIT, VALUE_LIMIT))  # finite stay finite
    inset = stroke_inset(mode, line_width) if style == "line" else 0.5  # bars have no stroke to keep whole
    points = series_points(values, lengths, *value_range(values, lengths, scale, per_image), height, width, inset)
    antialiased = mode == "antialiased"
    peaks = bar_peaks(points, height, per_image, look.peak_fall) if styled and look.peak_fall > 0 else None
    # the layers' colours and the background's, moved to the device once: [M+1,4]
    palette = torch.tensor(ink + [tuple(background)], dtype=torch.float32, device=home)
    gradient = None  # RGBA [H,W,4] replacing the layers' colours, made once where the images are drawn
    if look.gradient:
        stops = torch.tensor([tuple(c) for c in look.gradient], dtype=torch.float32).to(device)
        gradient = _gradient_image(stops, height, width, look, style == "bars")
    images = torch.empty(batch, height, width, 3 if opaque else 4, device=home)
    alpha = torch.empty(batch, height, width, device=home)

    def composite(start, stop, dev):
        rows = slice(start * per_image, stop * per_image)
        on = lambda t: t[rows].to(dev)  # noqa: E731
        if styled:
            crest = None if peaks is None else on(peaks)
            coverage = _styled_bar_coverage(on(points), on(lengths), crest, height, width, antialiased, look)
        elif style == "bars":
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
        paint = None if gradient is None else gradient.to(dev)
        if paint is not None:
            opacity = opacity * paint[..., 3]
        into = None  # the output slice the colour was blended straight into
        if len(ink) <= FEW_LAYERS:  # source-over one layer at a time on the premultiplied background
            colour = (behind_colour[:3] * behind_colour[3]).expand(stop - start, height, width, 3)
            covered = opacity[:, 0]
            for m in range(len(ink)):
                # the top layer's blend straight into the output where that is the result
                into = images[start:stop] if m == len(ink) - 1 and opaque and dev == home else None
                ink_colour = layers[m, :3] if paint is None else paint[..., :3]
                colour = torch.lerp(colour, ink_colour.expand_as(colour), opacity[:, m, ..., None], out=into)
                if m:
                    covered = torch.lerp(covered, covered.new_ones(()), opacity[:, m])
            behind = ((1 - covered) * behind_colour[3])[..., None]
        else:  # each layer shows its opacity times what the layers above let through: a fixed op count
            through = (1 - opacity).flip(1).cumprod(1).flip(1)  # [b,M,H,W]: layers m.. together
            shown = opacity * torch.cat([through[:, 1:], torch.ones_like(through[:, :1])], 1)
            covered = shown.sum(1)
            if paint is None:
                colour = torch.einsum("bmhw,mc->bhwc", shown, layers[:, :3])
            else:
                colour = covered[..., None] * paint[..., :3]
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
    styled: bool = False,
) -> tuple[int, int, int]:
    """render_series' memory in bytes, for `batch` images of height x width x channels (and their alpha)
    of per_image series of `steps` values each, `layers` inks (lines and fills), values_drawn when every
    segment of a chunk is set up at once (see VALUE_BYTES), styled for bars in a Look (STYLED_PIXEL_BYTES
    more per pixel-layer): (the least it can run in: the outputs and one
    image's work, its expected peak, the images a chunk takes). Chunks hold about CHUNK_WORK and fit
    beside the outputs in memory_budget(device)."""
    outputs = batch * height * width * (channels + 1) * 4 + batch * per_image * steps * 16  # and the points
    per_layer = PIXEL_LAYER_BYTES + (STYLED_PIXEL_BYTES if styled else 0)
    item = height * width * (per_layer * layers + PIXEL_BYTES) + per_image * steps * STEP_BYTES
    if values_drawn:
        item += height * width * SEGMENT_PIXEL_BYTES + per_image * steps * VALUE_BYTES
    work = per_image * (height * width * layers + (steps * VALUE_WORK if values_drawn else 0))
    limit = max(1, min(batch, CHUNK_WORK // max(1, work), (memory_budget(device) - outputs) // item))
    return outputs + item, outputs + limit * item, limit


def render_spectrogram(
    values: torch.Tensor,
    height: int,
    width: int,
    colormap,
    history: int = 0,
    scale: str = "per_image",
    background=(0.0, 0.0, 0.0, 1.0),
    device=None,
    on_progress=None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Spectrogram images of spectra values float [F,n] (frame after frame, bands from low to high):
    time along x, frequency up y (nearest value), each value coloured from colormap stops (S >= 1 RGBA
    tuples, evenly spaced, sampled at SPECTROGRAM_LEVELS places) by its place between the lowest and
    highest value of the frames its image shows (scale "per_image") or of every frame ("shared"), over
    the background (RGBA; opaque: RGB images). history 0: one image of every frame; else F images,
    image t of frames t - history + 1 .. t (the latest at the right edge; before the first frame: the
    colour map's lowest colour). Returns images float32 [B,H,W,3|4] and alpha float32 [B,H,W] (the
    colour map's opacity) on values' device, rendered on `device` (default: the same) in chunks."""
    if scale not in ("per_image", "shared"):
        raise ValueError(f"scale: expected 'per_image' or 'shared', got {scale!r}")
    if history < 0:
        raise ValueError(f"history: expected 0 (every frame) or a number of frames, got {history!r}")
    if not colormap:
        raise ValueError("colormap: expected at least one RGBA colour")
    frames, bands = values.shape
    home = values.device
    device = torch.device(device) if device is not None else home
    opaque = background[3] >= 1
    batch, shown = (1, frames) if history == 0 else (frames, history)
    check_memory(batch * height * width * 24, f"spectrogram: {batch:,} images of {height} x {width}", device)
    values = values.float()
    # the colour map over the background, as output channels, sampled at SPECTROGRAM_LEVELS places: [L,C+1]
    palette = torch.tensor([tuple(background)] + [tuple(c) for c in colormap], dtype=torch.float32, device=home)
    under, stops = palette[0], palette[1:]
    colour = gradient_colours(stops, torch.linspace(0, 1, SPECTROGRAM_LEVELS, device=home))
    opacity = colour[:, 3:]
    rgb = torch.lerp((under[:3] * under[3]).expand_as(colour[:, :3]), colour[:, :3], opacity)
    if not opaque:
        rgb = straight_alpha(torch.cat([rgb, opacity + (1 - opacity) * under[3]], -1))
    levels = torch.cat([rgb, opacity], -1)
    # the level of every value, and past the last row the frames before the first (the lowest level)
    step = (SPECTROGRAM_LEVELS - 1) / (values.amax() - values.amin())  # "shared": every frame's range
    table = torch.cat([values, values.new_full((1, bands), math.nan)])
    shared = ((table - values.amin()) * step + 0.5).nan_to_num_(0.0).clamp_(0, SPECTROGRAM_LEVELS - 1).long()
    images = torch.empty(batch, height, width, 3 if opaque else 4, device=home)
    alpha = torch.empty(batch, height, width, device=home)

    def paint(start, stop, dev):
        # each column's frame (before the first: row F of the table), the latest of image b being b (history)
        column = ((torch.arange(width, device=dev) + 0.5) * (shown / width)).long()
        frame = column[None] + (torch.arange(start, stop, device=dev)[:, None] - (shown - 1) if history else 0)
        frame = frame.where(frame >= 0, frames)  # [b,W]
        if scale == "shared" or history == 0:  # one range for the image(s): every value's level, made once
            level = shared.to(dev)[frame]  # [b,W,n]
        else:  # each image's own range, over the frames it shows
            window = table.to(dev)[frame]
            lowest = window.nan_to_num(math.inf).amin((1, 2), keepdim=True)
            ratio = (SPECTROGRAM_LEVELS - 1) / (window.nan_to_num(-math.inf).amax((1, 2), keepdim=True) - lowest)
            level = ((window - lowest) * ratio + 0.5).nan_to_num_(0.0).clamp_(0, SPECTROGRAM_LEVELS - 1).long()
        # each row's band (low frequencies at the bottom), then one lookup per pixel into each output
        row = ((height - 0.5 - torch.arange(height, device=dev)) * (bands / height)).long().clamp_max(bands - 1)
        level = level.transpose(1, 2).index_select(1, row).flatten()  # [b*H*W]
        for out, lookup in ((images, levels[:, :-1]), (alpha, levels[:, -1])):
            chunk = out[start:stop]
            if dev == home:
                torch.index_select(lookup, 0, level, out=chunk.view(-1, *lookup.shape[1:]))
            else:
                chunk.copy_(lookup.to(dev)[level].view(chunk.shape))

    limit = max(1, min(batch, CHUNK_WORK // (height * width)))
    run_chunked(paint, batch, 1, device, on_progress, limit=limit)
    return images, alpha
