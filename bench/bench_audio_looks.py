"""Audio visualiser looks of Series To Images, each against the plain render it styles: bars of an audio
spectrum (radial, centre mirror, reflection, gradient, peak caps, all at once), spectrograms, and the
spectrum's frequency scales against its log bands. A look may cost at most 2x the plain render.
    .venv/bin/python bench/bench_audio_looks.py [--quick]
"""

from __future__ import annotations

import math
import sys

import torch

from _common import report, table, timed_together
from utils.core.device import torch_device  # noqa: E402  (_common puts the repository root on sys.path)
from utils.gpu_rendering.series import Look, render_series, render_spectrogram  # noqa: E402
from utils.inputs.audio import from_audio_spectrum  # noqa: E402
from utils.inputs.series import gradient_stops  # noqa: E402

QUICK = "--quick" in sys.argv
FRAMES, BANDS, HEIGHT, WIDTH, RATE = (48 if QUICK else 240), 64, 256, 512, 48000


def music(seconds: float) -> dict:
    """A chord over a rising chirp with a beat: energy moving across the bands."""
    t = torch.arange(int(RATE * seconds)) / RATE
    chord = sum(torch.sin(2 * math.pi * f * t) for f in (220.0, 277.2, 329.6)) / 3
    sweep = torch.sin(2 * math.pi * (100 * t + 400 * t**2 / seconds))
    beat = (torch.sin(2 * math.pi * 2 * t) > 0.9).float() * torch.randn(
        len(t), generator=torch.Generator().manual_seed(0)
    )
    return {"waveform": (0.4 * chord + 0.3 * sweep + 0.3 * beat)[None, None], "sample_rate": RATE}


def main():
    device = torch_device()
    sync = torch.cuda.synchronize if device.type == "cuda" else None
    audio = music(FRAMES / 24)
    spectrum = from_audio_spectrum(audio, FRAMES, fps=24.0, bands=BANDS, smoothing=0.5)
    magma = tuple(gradient_stops("magma"))
    repeat = 3 if QUICK else 5

    def bars(look):
        return lambda: render_series(spectrum, HEIGHT, WIDTH, style="bars", device=device, look=look)

    looks = [
        ("plain bars", Look()),
        ("radial", Look(layout="radial")),
        ("mirror centre", Look(mirror="centre")),
        ("reflection", Look(mirror="reflection")),
        ("gradient (magma)", Look(gradient=magma)),
        ("peak caps (peak_fall 0.02)", Look(peak_fall=0.02)),
        ("radial + reflection + gradient + caps", Look("radial", "reflection", magma, 0.02)),
        ("mirror centre + gradient + caps", Look("linear", "centre", magma, 0.02)),
    ]
    times = timed_together([bars(look) for _, look in looks], repeat, sync=sync)
    plain = times[0]
    rows = [
        [name, f"{s * 1e3:.1f}", f"{FRAMES / s:,.0f}", f"{s / plain:.2f}x"]
        for (name, _), s in zip(looks, times, strict=True)
    ]

    # spectrograms against the plain bars of the same spectra, at the same size
    def spectrogram(history):
        return lambda: render_spectrogram(spectrum.values, HEIGHT, WIDTH, magma, history, device=device)

    whole, scrolling = timed_together([spectrogram(0), spectrogram(128)], repeat, sync=sync)
    rows.append(["spectrogram, one image of the clip", f"{whole * 1e3:.1f}", "", f"{whole / plain:.2f}x"])
    rows.append(
        [
            f"spectrogram, scrolling (history 128), {FRAMES} images",
            f"{scrolling * 1e3:.1f}",
            f"{FRAMES / scrolling:,.0f}",
            f"{scrolling / plain:.2f}x",
        ]
    )

    scales = ["log", "linear", "mel", "bark", "1/3 octave"]
    spectra = timed_together(
        [
            lambda s=s: from_audio_spectrum(
                audio, FRAMES, fps=24.0, bands=BANDS, smoothing=0.5, frequency_scale=s, min_hz=40.0, max_hz=16000.0
            )
            for s in scales
        ],
        repeat,
    )
    scale_rows = [[s, f"{t * 1e3:.1f}", f"{t / spectra[0]:.2f}x"] for s, t in zip(scales, spectra, strict=True)]
    report(
        "audio_looks",
        f"Audio visualiser looks: {FRAMES} frames of {BANDS} bars, {WIDTH}x{HEIGHT}, on {device.type}",
        [
            ("Looks against plain bars (render_series)", table(["look", "ms", "frames/s", "vs plain"], rows)),
            (
                f"Spectrum of {FRAMES / 24:.0f} s of audio at 24 fps, 2048-sample FFT, by frequency scale (on the CPU)",
                table(["frequency_scale", "ms", "vs log"], scale_rows),
            ),
        ],
        "python bench/bench_audio_looks.py" + (" --quick" if QUICK else ""),
    )


if __name__ == "__main__":
    main()
