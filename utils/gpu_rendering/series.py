"""Series for line plots from text (JSON or CSV) or from audio (waveform windows or spectra), as one
padded batch, and their images: one or several series per image, as lines (optionally filled under)
or bars, composited over an opaque or transparent background."""
from __future__ import annotations

import csv
import io
import math
from fractions import Fraction

import torch

from ..core.batching import Ragged, pack
from ..core.device import check_memory, memory_budget, numba_usable, run_chunked
from .compositor import straight_alpha
from .line_plots import fill_coverage, render_polylines, series_points, value_range
from ..inputs.text import check_size, load_json


# More values than this per plot cost memory (anti-aliased lines: ~40 KB per value) without a visible
# difference: a plot is at most 8192 px wide. Audio windows longer than this are reduced to their envelope.
MAX_SERIES_VALUES = 65_536
# Spectra: amplitudes below this many dB under full scale show as the floor (silence is finite); the
# lowest band is at this frequency, or at the first FFT bin when the window is too short to resolve it.
SPECTRUM_FLOOR_DB = -80.0
SPECTRUM_LOWEST_HZ = 20.0
# Bars fill their slot of the plot's width but for a gap of this fraction, so that neighbours stay apart.
BAR_GAP = 0.2
# Finite values are clipped to +-this: float32 holds it, and the range between two of them stays finite
# (1e308 would become infinite in float32: a blank plot; 1e39 a gap).
VALUE_LIMIT = 1e37
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


def _number(value, where: str, input_name: str) -> float:
    """A float clipped to +-VALUE_LIMIT (NaN kept: a gap); ValueError naming the input otherwise."""
    try:
        number = float(value)
    except OverflowError:  # an integer past float range: finite, so clipped like the others
        return VALUE_LIMIT if value > 0 else -VALUE_LIMIT
    except (TypeError, ValueError):
        raise ValueError(f"{input_name}: {where} is not a number: {value!r}") from None
    if math.isinf(number):
        raise ValueError(f"{input_name}: {where} is infinite; use null or NaN for a gap")
    return min(max(number, -VALUE_LIMIT), VALUE_LIMIT)


def from_text(text: str, orientation: str = "rows", input_name: str = "series") -> Ragged:
    """JSON (a list of numbers: one series; a list of lists: one series each; an object of named lists:
    one series each, in the object's order; null = NaN = gap) or CSV (numbers; one series per row, or
    per column with orientation "columns"; a header row of names is skipped; empty cells are gaps).
    Returns Ragged values [B,T] float32."""
    text = (text or "").strip()
    if not text:
        raise ValueError(f"{input_name}: empty; give JSON such as [[1, 2, 3], [3, 1, 2]] or CSV rows, or connect audio")
    if text[0] in "[{":
        data = load_json(text, input_name)
        if isinstance(data, dict):  # text starting with { or [ is an object or a list
            names, data = [repr(name) for name in data], list(data.values())
        else:
            if all(not isinstance(item, list) for item in data):
                data = [data]
            names = list(range(len(data)))
        rows = []
        for name, item in zip(names, data):
            if not isinstance(item, list):
                raise ValueError(f"{input_name}: series {name} is not a list: {item!r}")
            rows.append([math.nan if v is None else _number(v, f"series {name} value {j}", input_name)
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


def _clip(audio, input_name: str) -> torch.Tensor:
    """The first clip of ComfyUI AUDIO {"waveform": [B,C,S], "sample_rate"}: float32 [C,S], NaN as silence."""
    try:
        waveform = audio["waveform"]
    except (TypeError, KeyError):
        raise ValueError(f"{input_name}: expected ComfyUI AUDIO, a dict with a 'waveform' tensor [B,C,S]") from None
    if not isinstance(waveform, torch.Tensor) or waveform.ndim != 3:
        raise ValueError(f"{input_name}: waveform must be a tensor [B,C,S], got {getattr(waveform, 'shape', waveform)!r}")
    if waveform.shape[0] == 0 or waveform.shape[1] == 0:
        raise ValueError(f"{input_name}: the waveform holds no clip or no channel: shape {tuple(waveform.shape)}")
    return torch.nan_to_num(waveform[0].float())


def _sample_rate(audio, input_name: str) -> int:
    rate = audio.get("sample_rate")
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not rate >= 1:
        raise ValueError(f"{input_name}: needs a positive 'sample_rate' for fps and spectra, got {rate!r}")
    return int(rate)


def _window_starts(samples: int, window: int, frames: int, fps: float, rate: int | None) -> torch.Tensor:
    """First sample (int64 [F], may be negative or past the end) of the window of `window` samples of
    each frame: `frames` frames of samples // frames samples each (fps 0), else one per 1/fps seconds;
    each window centred on the middle of its frame's interval. Exact integer arithmetic: float32 holds
    sample indices exactly only up to 2**24 (six minutes at 48 kHz)."""
    if fps == 0:
        hop = Fraction(samples // frames)
    else:
        frames = max(1, round(samples * fps / rate))
        hop = rate / Fraction(fps).limit_denominator(1_000_000)
    # start = round((i + 1/2) hop - window / 2) = floor(((2i + 1) hop - window + 1) / 2), hop = p / q
    p, q = hop.numerator, hop.denominator
    twice = (2 * torch.arange(frames, dtype=torch.long) + 1) * p - (window - 1) * q
    return torch.div(twice, 2 * q, rounding_mode="floor")


def _windows(signal: torch.Tensor, starts: torch.Tensor, window: int) -> torch.Tensor:
    """signal [C,S], starts int64 [F] -> [F,C,window]: samples outside the clip are silence."""
    index = starts.to(signal.device)[:, None] + torch.arange(window, device=signal.device)
    inside = (index >= 0) & (index < signal.shape[1])
    return signal[:, index.clamp(0, signal.shape[1] - 1)].permute(1, 0, 2) * inside[:, None]


def from_audio(audio, frames: int, fps: float = 0.0, channels: bool = False, input_name: str = "audio") -> Ragged:
    """ComfyUI AUDIO {"waveform": [B,C,S], "sample_rate"}: the first clip's waveform in one window per
    frame, one series each (an audio-reactive video). Frames: `frames` equal windows over the clip, or
    with fps > 0 one per 1/fps seconds (duration x fps frames, rounded, at least one), each window the
    frame's interval. channels: one series per channel, frame after frame ([F*C, T]), else the channels
    averaged ([F, T])."""
    signal = _clip(audio, input_name)
    if frames < 1:
        raise ValueError(f"frames: expected at least 1 window, got {frames!r}")
    samples = signal.shape[1]
    if fps == 0:
        if samples < 2 * frames:
            raise ValueError(f"{input_name}: {samples} samples cannot make {frames} frames of at least 2 samples")
        window, rate = samples // frames, None
    else:
        rate = _sample_rate(audio, input_name)
        window = round(rate / fps)
        if window < 2:
            raise ValueError(f"fps: {fps:g} frames per second leave fewer than 2 samples per frame at {rate} Hz")
    if not channels:
        signal = signal.mean(0, keepdim=True)
    values = _windows(signal, _window_starts(samples, window, frames, fps, rate), window).flatten(0, 1)
    if window > MAX_SERIES_VALUES:  # the envelope: minimum and maximum of each of MAX/2 runs of samples
        runs = MAX_SERIES_VALUES // 2
        run = window // runs
        grouped = values[:, : runs * run].reshape(values.shape[0], runs, run)
        values = torch.stack([grouped.amin(-1), grouped.amax(-1)], -1).reshape(values.shape[0], 2 * runs)
    return Ragged(values, torch.full((values.shape[0],), values.shape[1], dtype=torch.long, device=values.device))


def spectrum_bands(rate: int, fft_size: int, bands: int, device=None) -> torch.Tensor:
    """Centre frequencies float32 [bands] in Hz, log-spaced from SPECTRUM_LOWEST_HZ (or the first FFT
    bin, rate / fft_size, when higher) to the Nyquist frequency, rate / 2."""
    lowest, highest = _band_range(rate, fft_size)
    return torch.logspace(math.log10(lowest), math.log10(highest), bands, device=device)


def _band_range(rate: int, fft_size: int) -> tuple[float, float]:
    highest = rate / 2
    return max(min(SPECTRUM_LOWEST_HZ, highest / 2), rate / fft_size), highest


def from_audio_spectrum(audio, frames: int, fps: float = 0.0, fft_size: int = 2048, bands: int = 64,
                        magnitude: str = "dB", smoothing: float = 0.0, channels: bool = False,
                        input_name: str = "audio") -> Ragged:
    """ComfyUI AUDIO as one spectrum per frame (frames as in from_audio): the amplitude of each band of
    torch.fft.rfft over a Hann window of fft_size samples centred on the frame (silence past the clip's
    ends), on `bands` log-spaced frequencies (spectrum_bands; a band's value is the largest bin within it,
    or the amplitude interpolated at its centre where no bin is). Amplitudes are of a full-scale sine = 1;
    smoothed over frames (each frame `smoothing` of the last one plus 1 - smoothing of its own, as Web
    Audio's AnalyserNode); magnitude "dB" (20 log10, floored at SPECTRUM_FLOOR_DB) or "linear".
    channels: one spectrum per channel ([F*C, bands]), else of the channels averaged ([F, bands])."""
    if magnitude not in ("dB", "linear"):
        raise ValueError(f"magnitude: expected 'dB' or 'linear', got {magnitude!r}")
    if bands < 2:
        raise ValueError(f"bands: expected at least 2, got {bands!r}")
    if not 0 <= smoothing < 1:
        raise ValueError(f"smoothing: expected 0 <= smoothing < 1, got {smoothing!r}")
    signal = _clip(audio, input_name)
    rate = _sample_rate(audio, input_name)
    if fps == 0 and not 1 <= frames <= signal.shape[1]:
        raise ValueError(f"{input_name}: {signal.shape[1]} samples cannot make {frames} frames of at least 1 sample")
    if not channels:
        signal = signal.mean(0, keepdim=True)
    starts = _window_starts(signal.shape[1], fft_size, frames, fps, rate)
    hann = torch.hann_window(fft_size, device=signal.device)
    bins = fft_size // 2 + 1
    centres = spectrum_bands(rate, fft_size, bands, signal.device)
    position = centres * (fft_size / rate)  # fractional bin of each band's centre
    left = position.floor().long().clamp(0, bins - 2)
    # each bin raises the band that holds it: bands end halfway (in log frequency) to their neighbours
    lowest, highest = _band_range(rate, fft_size)
    half_step = math.log(highest / lowest) / (bands - 1) / 2
    edges = torch.cat([centres[:1] * math.exp(-half_step), (centres[:-1] * centres[1:]).sqrt(),
                       centres[-1:] * math.exp(half_step)])
    band = torch.bucketize(torch.arange(bins, device=signal.device) * (rate / fft_size), edges, right=True) - 1
    band = torch.where((band >= 0) & (band < bands), band, bands)  # outside every band: a spare column

    def band_amplitudes(chunk_starts: torch.Tensor) -> torch.Tensor:
        """[F',C,bands] for the windows starting at chunk_starts int64 [F']."""
        spectra = torch.fft.rfft(_windows(signal, chunk_starts, fft_size) * hann, dim=-1).abs() * (2 / hann.sum())
        amplitude = torch.lerp(spectra[..., left], spectra[..., left + 1], (position - left).clamp(0, 1))
        amplitude = torch.cat([amplitude, amplitude.new_zeros(*spectra.shape[:2], 1)], -1)
        amplitude = amplitude.scatter_reduce_(-1, band.expand_as(spectra), spectra, "amax", include_self=False)
        return amplitude[..., :bands]

    # frames in chunks of ~4M window samples (tens of MB of temporaries), so that a long clip with a large
    # fft_size fits in memory; every chunk is one batched FFT
    chunk = max(1, (1 << 22) // (fft_size * signal.shape[0]))
    amplitude = torch.cat([band_amplitudes(starts[i:i + chunk]) for i in range(0, len(starts), chunk)])
    count, per_frame = amplitude.shape[:2]
    amplitude = exponential_smoothing(amplitude.reshape(count, -1), smoothing).reshape(count * per_frame, bands)
    if magnitude == "dB":
        amplitude = 20 * amplitude.clamp_min(10 ** (SPECTRUM_FLOOR_DB / 20)).log10()
    return Ragged(amplitude, torch.full((amplitude.shape[0],), bands, dtype=torch.long, device=amplitude.device))


def exponential_smoothing(values: torch.Tensor, factor: float) -> torch.Tensor:
    """values float [F,N] smoothed over F: out[0] = values[0], out[t] = factor out[t-1] + (1 - factor)
    values[t], without a loop over F: a scan in blocks of ~sqrt(F) rows (one matrix product within the
    blocks, one across their ends), every weight a power factor**n with n >= 0 (no overflow)."""
    frames = values.shape[0]
    if factor == 0 or frames < 2:
        return values
    block = math.isqrt(frames - 1) + 1
    blocks = -(-frames // block)
    padded = torch.cat([values, values.new_zeros(blocks * block - frames, values.shape[1])]).view(blocks, block, -1)
    log_factor = math.log(factor)

    def powers(n: torch.Tensor) -> torch.Tensor:  # factor**n for n >= 0, else 0
        return torch.where(n >= 0, (n.clamp_min(0) * log_factor).exp(), 0.0)

    step = torch.arange(block, device=values.device, dtype=values.dtype)
    local = torch.matmul((1 - factor) * powers(step[:, None] - step[None]), padded)  # each block from rest
    # the state at each block's end: its local end plus the state before it, decayed over the block
    index = torch.arange(blocks, device=values.device, dtype=values.dtype)
    ends = powers((index[:, None] - index[None]) * block) @ local[:, -1] + powers((index[:, None] + 1) * block) * values[:1]
    before = torch.cat([values[:1], ends[:-1]])  # the state entering each block (the first: values[0])
    smoothed = local + powers(step + 1)[None, :, None] * before[:, None]
    return smoothed.reshape(blocks * block, -1)[:frames]


def _bar_coverage(points: torch.Tensor, lengths: torch.Tensor, height: int, width: int,
                  antialiased: bool) -> torch.Tensor:
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
        1, centre, points[..., 1].nan_to_num(math.inf), "amin")  # the smallest y: the highest bar, inf over gaps
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


def render_series(data: Ragged, height: int, width: int, per_image: int = 1, style: str = "line",
                  mode: str = "antialiased", line_width: float = 2.0, scale: str = "per_image",
                  colors=((1.0, 1.0, 1.0, 1.0),), fill_colors=None, background=(0.0, 0.0, 0.0, 1.0),
                  device=None, on_progress=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Images of B = N / per_image plots: image b shows series b*K .. b*K+K-1 of data (Ragged y values
    [N,T], K = per_image) over each other, series k in colors[k] (RGBA, K of them), later ones on top.
    style "line": render_polylines' lines (mode, line_width), over the area under each in fill_colors[k]
    (RGBA, or None: no fill; every area under every line); "bars": one bar per value in colors[k].
    scale: min-max over each image's series, or over all ("shared"): the lowest at the bottom row centre.
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
    least, _peak, limit = series_memory(batch, steps, height, width, per_image, len(ink), 3 if opaque else 4,
                                        values_drawn, device)
    check_memory(least, f"series: {batch:,} plots of {height} x {width} ({per_image * steps:,} values each)", device)
    lengths = data.lengths.to(home)
    values = data.values.float()
    values = torch.where(values.isinf(), values, values.clamp(-VALUE_LIMIT, VALUE_LIMIT))  # finite stay finite
    points = series_points(values, lengths, *value_range(values, lengths, scale, per_image), height, width)
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
            coverage = render_polylines(on(points), height, width, on(lengths), mode=mode, line_width=line_width,
                                        on_progress=inner)
        coverage = coverage.view(stop - start, per_image, height, width)
        if len(ink) > per_image:
            under = fill_coverage(on(points), on(lengths), height, width, antialiased)
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


def series_memory(batch: int, steps: int, height: int, width: int, per_image: int, layers: int, channels: int,
                  values_drawn: bool, device) -> tuple[int, int, int]:
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
