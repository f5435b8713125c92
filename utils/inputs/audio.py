"""ComfyUI AUDIO as series for the line-plot engine: the first clip's waveform in one window per video
frame, or its spectrum per frame (FFT amplitudes on log-spaced bands, smoothed over frames)."""

from __future__ import annotations

import math
from fractions import Fraction

import torch

from ..core.batching import Ragged
from .series import MAX_SERIES_VALUES

# Spectra: amplitudes below this many dB under full scale show as the floor (silence is finite); the
# lowest band is at this frequency, or at the first FFT bin when the window is too short to resolve it.
SPECTRUM_FLOOR_DB = -80.0
SPECTRUM_LOWEST_HZ = 20.0


def _clip(audio, input_name: str) -> torch.Tensor:
    """The first clip of ComfyUI AUDIO {"waveform": [B,C,S], "sample_rate"}: float32 [C,S], NaN as silence."""
    try:
        waveform = audio["waveform"]
    except (TypeError, KeyError):
        raise ValueError(f"{input_name}: expected ComfyUI AUDIO, a dict with a 'waveform' tensor [B,C,S]") from None
    if not isinstance(waveform, torch.Tensor) or waveform.ndim != 3:
        raise ValueError(
            f"{input_name}: waveform must be a tensor [B,C,S], got {getattr(waveform, 'shape', waveform)!r}"
        )
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


# Frequency scales of the spectrum's bands: centres evenly spaced on the scale's axis (log: in log
# frequency, mel: HTK mels, bark: Traunmüller's formula), or 1/3-octave bands (centres 1000 * 2**(k/3) Hz,
# IEC 61260's base-2 series, edges a sixth of an octave either side; as many as fit in the range).
FREQUENCY_SCALES = ("log", "linear", "mel", "bark", "1/3 octave")
# Traunmüller's bark formula has a pole at this many barks (infinite frequency): band edges stay below it.
_BARK_POLE = 26.28


def _to_scale(hz: float, scale: str) -> float:
    if scale == "mel":
        return 2595 * math.log10(1 + hz / 700)
    if scale == "bark":
        return 26.81 * hz / (1960 + hz) - 0.53
    return hz  # linear


def _from_scale(value, scale: str):
    if scale == "mel":
        return 700 * (torch.pow(10, value / 2595) - 1)
    if scale == "bark":
        value = value.clamp_max(_BARK_POLE - 0.01)
        return 1960 * (value + 0.53) / (_BARK_POLE - value)
    return value  # linear


def spectrum_bands(
    rate: int,
    fft_size: int,
    bands: int,
    device=None,
    min_hz: float = SPECTRUM_LOWEST_HZ,
    max_hz: float = 0.0,
    scale: str = "log",
) -> torch.Tensor:
    """Centre frequencies float32 [bands] in Hz (1/3 octave: as many as fit), from min_hz (or the first
    FFT bin, rate / fft_size, when higher) to max_hz (0: the Nyquist frequency, rate / 2), spaced
    evenly on `scale` (FREQUENCY_SCALES)."""
    return band_layout(rate, fft_size, bands, device, min_hz, max_hz, scale)[0]


def band_layout(
    rate: int,
    fft_size: int,
    bands: int,
    device=None,
    min_hz: float = SPECTRUM_LOWEST_HZ,
    max_hz: float = 0.0,
    scale: str = "log",
) -> tuple[torch.Tensor, torch.Tensor]:
    """(centres float32 [n], edges float32 [n+1]) in Hz of spectrum_bands' bands: band i holds the
    frequencies in [edges[i], edges[i+1]), its edges halfway (on the scale) to its neighbours' centres
    and as far out at the ends; n = bands, or the 1/3-octave centres in the range."""
    if scale not in FREQUENCY_SCALES:
        raise ValueError(f"frequency_scale: expected one of {', '.join(FREQUENCY_SCALES)}, got {scale!r}")
    lowest, highest = _band_range(rate, fft_size, min_hz, max_hz)
    if scale == "log":
        centres = torch.logspace(math.log10(lowest), math.log10(highest), bands, device=device)
        half_step = math.log(highest / lowest) / (bands - 1) / 2
        edges = torch.cat(
            [
                centres[:1] * math.exp(-half_step),
                (centres[:-1] * centres[1:]).sqrt(),
                centres[-1:] * math.exp(half_step),
            ]
        )
        return centres, edges
    if scale == "1/3 octave":
        first = math.ceil(3 * math.log2(lowest / 1000) - 1e-9)
        last = math.floor(3 * math.log2(highest / 1000) + 1e-9)
        if last < first:
            raise ValueError(f"min_hz, max_hz: no 1/3-octave band centre between {lowest:g} and {highest:g} Hz")
        steps = torch.arange(first, last + 2, device=device, dtype=torch.float32)
        centres = 1000 * torch.pow(2.0, steps[:-1] / 3)
        return centres, 1000 * torch.pow(2.0, (steps - 0.5) / 3)
    low, high = _to_scale(lowest, scale), _to_scale(highest, scale)
    axis = torch.linspace(low, high, bands, device=device)
    half_step = (high - low) / (bands - 1) / 2
    edges = torch.cat([axis[:1] - half_step, (axis[:-1] + axis[1:]) / 2, axis[-1:] + half_step])
    return _from_scale(axis, scale), _from_scale(edges, scale)


def _band_range(rate: int, fft_size: int, min_hz: float = SPECTRUM_LOWEST_HZ, max_hz: float = 0.0):
    """(lowest, highest) band centre in Hz; ValueError naming min_hz or max_hz when they leave no range."""
    nyquist = rate / 2
    if not (0 <= min_hz and 0 <= max_hz):
        raise ValueError(f"min_hz, max_hz: expected frequencies >= 0 Hz, got {min_hz!r} and {max_hz!r}")
    highest = nyquist if max_hz == 0 else min(max_hz, nyquist)
    if min_hz != SPECTRUM_LOWEST_HZ and min_hz >= highest:
        raise ValueError(
            f"min_hz: {min_hz:g} Hz is not below the highest band, {highest:g} Hz (max_hz, at most half "
            f"the sample rate {rate} Hz)"
        )
    if min_hz == SPECTRUM_LOWEST_HZ:  # the default gives way at tiny sample rates
        min_hz = min(min_hz, highest / 2)
    lowest = max(min_hz, rate / fft_size)
    if lowest >= highest:
        raise ValueError(
            f"max_hz: {highest:g} Hz is not above the lowest band the FFT resolves, {lowest:g} Hz "
            f"(sample rate / fft_size); raise max_hz or fft_size"
        )
    return lowest, highest


def from_audio_spectrum(
    audio,
    frames: int,
    fps: float = 0.0,
    fft_size: int = 2048,
    bands: int = 64,
    magnitude: str = "dB",
    smoothing: float = 0.0,
    channels: bool = False,
    input_name: str = "audio",
    min_hz: float = SPECTRUM_LOWEST_HZ,
    max_hz: float = 0.0,
    frequency_scale: str = "log",
) -> Ragged:
    """ComfyUI AUDIO as one spectrum per frame (frames as in from_audio): the amplitude of each band of
    torch.fft.rfft over a Hann window of fft_size samples centred on the frame (silence past the clip's
    ends), on `bands` frequencies from min_hz to max_hz spaced on frequency_scale (band_layout; 1/3 octave:
    as many as fit); a band's value is the largest bin within it, or the amplitude interpolated at its
    centre where no bin is. Amplitudes are of a full-scale sine = 1;
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
    # each bin raises the band that holds it: bands end halfway (on the scale) to their neighbours
    centres, edges = band_layout(rate, fft_size, bands, signal.device, min_hz, max_hz, frequency_scale)
    bands = len(centres)
    position = centres * (fft_size / rate)  # fractional bin of each band's centre
    left = position.floor().long().clamp(0, bins - 2)
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
    amplitude = torch.cat([band_amplitudes(starts[i : i + chunk]) for i in range(0, len(starts), chunk)])
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
    ends = (
        powers((index[:, None] - index[None]) * block) @ local[:, -1]
        + powers((index[:, None] + 1) * block) * values[:1]
    )
    before = torch.cat([values[:1], ends[:-1]])  # the state entering each block (the first: values[0])
    smoothed = local + powers(step + 1)[None, :, None] * before[:, None]
    return smoothed.reshape(blocks * block, -1)[:frames]
