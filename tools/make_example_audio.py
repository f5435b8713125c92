"""Write example_workflows/assets/rasterkit_chirp_chord.wav, the audio of the "Audio spectrum" example,
and rasterkit_chirp_chord.mp4, the same audio as a video's soundtrack (the "Audio-reactive radial
visualiser" example reads it through core Load Video, which needs no torchaudio):

    .venv/bin/python tools/make_example_audio.py

3 s of 16-bit stereo at 16 kHz (about 190 KB): the left channel an A major chord (220, 277, 330,
440 Hz) struck on every beat at 120 bpm, the right one a sweep from 110 Hz to 7 kHz whose pitch
rises evenly on a log frequency axis. The wav is deterministic (the same bytes on every run); the
video's frames are 64x64 of a dark blue that brightens on each beat, with the audio as AAC.
"""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
PATH = ROOT / "example_workflows" / "assets" / "rasterkit_chirp_chord.wav"
VIDEO_PATH = PATH.with_suffix(".mp4")
RATE = 16000
SECONDS = 3.0


def chirp_chord(rate: int = RATE, seconds: float = SECONDS) -> np.ndarray:
    """float32 [2, rate * seconds] in -1..1: the struck chord (left) and the sweep (right)."""
    t = np.arange(int(rate * seconds), dtype=np.float32) / np.float32(rate)
    low, high = np.float32(110), np.float32(7000)
    growth = np.log(high / low) / np.float32(seconds)
    sweep = np.sin(2 * np.pi * low * np.expm1(growth * t) / growth)  # exponential sweep: phase of low * e^(g t)
    beat = 0.5  # seconds between strikes (120 bpm)
    since = t % beat
    strike = np.sin(np.minimum(since / 0.03, 1) * np.pi / 2) ** 2 * np.exp(-since / 0.18)  # a soft attack: no click
    chord = sum(np.sin(2 * np.pi * f * t) for f in (220.0, 277.18, 329.63, 440.0)) / 4 * strike
    fade = np.minimum(1.0, np.minimum(t, seconds - t) / 0.02)  # no clicks at the ends
    return (np.stack([0.8 * chord, 0.6 * sweep]) * fade).astype(np.float32)


def write_wav(samples: np.ndarray, path: Path, rate: int = RATE) -> None:
    """samples: float [C, N] in -1..1, written as 16-bit PCM."""
    pcm = np.round(np.clip(samples, -1, 1) * 32767).astype("<i2")
    with wave.open(str(path), "wb") as file:
        file.setnchannels(samples.shape[0])
        file.setsampwidth(2)
        file.setframerate(rate)
        file.writeframes(pcm.T.tobytes())


def write_video(samples: np.ndarray, path: Path, rate: int = RATE, fps: int = 24, size: int = 64) -> None:
    """samples: float [2, N] in -1..1, as the AAC soundtrack of an H.264 clip as long as them."""
    import av

    with av.open(str(path), "w") as container:
        video = container.add_stream("libx264", rate=fps)
        video.width = video.height = size
        video.pix_fmt = "yuv420p"
        audio = container.add_stream("aac", rate=rate, layout="stereo")
        for index in range(round(samples.shape[1] / rate * fps)):
            since = index / fps % 0.5  # the chord's beat
            level = np.uint8(40 + 80 * np.exp(-since / 0.18))
            picture = np.zeros((size, size, 3), np.uint8) + np.array([level // 4, level // 3, level], np.uint8)
            container.mux(video.encode(av.VideoFrame.from_ndarray(picture, format="rgb24")))
        frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(samples), format="fltp", layout="stereo")
        frame.sample_rate = rate
        for packet in (*audio.encode(frame), *audio.encode(None), *video.encode(None)):
            container.mux(packet)


if __name__ == "__main__":
    samples = chirp_chord()
    write_wav(samples, PATH)
    write_video(samples, VIDEO_PATH)
    for path in (PATH, VIDEO_PATH):
        print(f"{path.relative_to(ROOT)}: {path.stat().st_size} bytes")
