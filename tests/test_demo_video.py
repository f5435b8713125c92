"""demo.py's MP4s: H.264 in yuv420p (what browsers play), with AAC sound where a demo has audio."""

import math

import numpy as np
import pytest
import torch

av = pytest.importorskip("av")  # requirements-dev.txt: the demo's requirement

import demo  # noqa: E402


def read(path):
    """(video stream facts, audio stream facts or None, decoded RGB frames [T,H,W,3] uint8, decoded audio
    [C,S] float or None) of an MP4."""
    with av.open(str(path)) as container:
        (video,) = container.streams.video
        facts = (
            video.codec_context.name,
            video.codec_context.pix_fmt,
            video.codec_context.width,
            video.codec_context.height,
        )
        frames = np.stack([frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)])
    with av.open(str(path)) as container:
        if not container.streams.audio:
            return facts, None, frames, None
        sound = container.streams.audio[0]
        sound_facts = (sound.codec_context.name, sound.codec_context.channels, sound.codec_context.sample_rate)
        samples = np.concatenate([frame.to_ndarray() for frame in container.decode(audio=0)], axis=1)
    return facts, sound_facts, frames, samples


def test_video_is_h264_yuv420p_padded_to_even_sizes(tmp_path):
    y, x = torch.meshgrid(torch.linspace(0, 1, 33), torch.linspace(0, 1, 47), indexing="ij")
    frames = torch.stack([torch.stack([x, y, (x + y + t / 12) % 1], -1) for t in range(12)])  # [12,33,47,3]
    demo.save_mp4(frames, tmp_path / "plain.mp4", fps=12)
    facts, sound, decoded, _ = read(tmp_path / "plain.mp4")
    assert facts == ("h264", "yuv420p", 48, 34) and sound is None
    assert decoded.shape == (12, 34, 48, 3)
    error = np.abs(decoded[:, :33, :47].astype(np.float32) - frames.numpy() * 255).mean()
    assert error < 6  # lossy, but the same pictures


def test_audio_is_muxed_as_aac_and_cut_to_the_video(tmp_path):
    rate = 16000
    t = torch.arange(2 * rate) / rate
    waveform = 0.5 * torch.stack([torch.sin(2 * math.pi * 440 * t), torch.sin(2 * math.pi * 660 * t)])[None]
    demo.save_mp4(
        torch.rand(24, 32, 32, 3), tmp_path / "sound.mp4", fps=24, audio={"waveform": waveform, "sample_rate": rate}
    )
    facts, sound, decoded, samples = read(tmp_path / "sound.mp4")
    assert facts[0] == "h264" and len(decoded) == 24
    assert sound == ("aac", 2, rate)
    assert abs(samples.shape[1] - rate) <= 2048  # the video's 1 s (AAC adds up to two frames of 1024)
    level = np.sqrt((samples[:, 2048:-2048] ** 2).mean(1))
    assert np.allclose(level, 0.5 / math.sqrt(2), rtol=0.1)  # the tones, not silence


def test_the_spectrum_demo_has_its_sound(pack, tmp_path, monkeypatch):
    """(The series demo's audio video, likewise, is checked by `make demo`: it takes a minute here.)"""
    monkeypatch.setenv("RASTERKIT_DISABLE_NUMBA", "1")  # the torch path: no compile in this test
    (path,) = [path for path in demo.DEMOS["spectrum"](pack, tmp_path) if path.suffix == ".mp4"]
    facts, sound, decoded, samples = read(path)
    assert facts[:2] == ("h264", "yuv420p") and sound == ("aac", 2, 16000)
    assert len(decoded) == 72 and abs(samples.shape[1] - 3 * 16000) <= 2048  # the example's 3 s at 24 fps


def test_the_demos_that_call_the_newest_outputs_run(tmp_path, monkeypatch):
    """`make demo` calls the nodes directly: a node that gains an output breaks it (the Point Tracker's third
    output did, unseen). The links demo (Point Tracker) and the box marks demo (the newest box inputs)
    run and write their files."""
    monkeypatch.setattr(demo, "OUTPUT", tmp_path)
    demo.main(["links", "box_marks"])
    assert {p.name for p in tmp_path.iterdir()} >= {"links.png", "links.mp4", "box_marks.png", "box_marks.mp4"}
