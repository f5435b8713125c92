"""RasterKit_SeriesToImages: line or bar plots of series, of audio windows or of audio spectra, as an
IMAGE batch and the ink's alpha."""

from __future__ import annotations

from ..utils.gpu_rendering.series import render_series
from ..utils.inputs.audio import from_audio, from_audio_spectrum
from ..utils.inputs.colors import parse_hex
from ..utils.inputs.series import from_text, series_colors
from ._comfy import Progress, intermediate_device, render_device
from ._schema import Bool, Combo, Float, Int, Output, RasterKitNode, Socket, String


class SeriesToImages(RasterKitNode):
    NODE_ID = "RasterKit_SeriesToImages"
    DISPLAY_NAME = "Series To Images (RasterKit)"
    CATEGORY = "RasterKit/plot"
    DESCRIPTION = (
        "Renders series as line or bar plots, all at once: from JSON or CSV text, or from audio, one "
        "window or spectrum per video frame (audio-reactive video). Several series can share an "
        "image, a colour each; a background with alpha gives RGBA images. NaN or empty values leave "
        "a gap."
    )
    INPUTS = [
        String(
            "series",
            "[[3, 1, 4, 1, 5, 9, 2, 6], [2, 7, 1, 8, 2, 8, 1, 8]]",
            multiline=True,
            tooltip="JSON list of lists (or one list, or an object of named lists), or CSV numbers; ignored "
            "when audio is connected",
        ),
        Combo("csv_series", ("rows", "columns"), tooltip="CSV: one series per row or per column"),
        Int("width", 224, 8, 8192, 8, tooltip="width of every plot in pixels"),
        Int("height", 224, 8, 8192, 8, tooltip="height of every plot in pixels"),
        Combo("mode", ("antialiased", "aliased"), tooltip="aliased: 1 px Bresenham lines; antialiased: line_width"),
        Float("line_width", 2.0, 0.25, 64.0, 0.25, tooltip="line width in pixels (antialiased mode)"),
        String("line_color", "#FFFFFF", tooltip="hex colour of the line, #RRGGBB or #RRGGBBAA (AA: its opacity)"),
        String(
            "background",
            "#000000",
            tooltip="hex colour behind the plot, #RRGGBB; #RRGGBBAA with AA below FF gives RGBA images "
            "(straight alpha; #00000000: transparent)",
        ),
        Bool("fill", False, tooltip="fill the area under the curve with fill_color (line style)"),
        String(
            "fill_color",
            "#FFFFFF40",
            tooltip="hex colour under the curve when fill is on, #RRGGBBAA; with overlay, each series' colour "
            "at this opacity",
        ),
        Combo("scale", ("per_image", "shared"), tooltip="min-max of each image's series, or of all of them"),
        Int("frames", 48, 1, 100000, tooltip="audio: number of windows, one image each (when fps is 0)"),
        Socket(
            "audio",
            "AUDIO",
            optional=True,
            tooltip="plots the first clip instead of series: its waveform or spectrum per frame, channels "
            "averaged (or overlaid)",
        ),
        Float(
            "fps",
            0.0,
            0.0,
            1000.0,
            0.001,
            tooltip="audio: frames per second of the video to match: duration x fps frames, each from the "
            "audio around its time; 0: use frames",
        ),
        Combo(
            "audio_plot",
            ("waveform", "spectrum"),
            tooltip="audio: the samples of each frame, or their spectrum (FFT amplitude on a log frequency "
            "axis from 20 Hz to half the sample rate)",
        ),
        Int("fft_size", 2048, 16, 65536, tooltip="spectrum: samples per FFT window (Hann), centred on each frame"),
        Int("bands", 64, 2, 4096, tooltip="spectrum: log-spaced frequencies plotted, one value (or bar) each"),
        Combo(
            "magnitude",
            ("dB", "linear"),
            tooltip="spectrum: amplitude in decibels (floor -80 dB) or linear (a full-scale sine is 1)",
        ),
        Float(
            "smoothing",
            0.5,
            0.0,
            0.99,
            0.01,
            tooltip="spectrum: each frame keeps this much of the last one (0: none), so bars fall smoothly",
        ),
        Combo("style", ("line", "bars"), tooltip="a line through the values, or one bar per value"),
        Bool(
            "overlay",
            False,
            tooltip="all series in one image (audio: its channels in each frame), a colour each from colors",
        ),
        String(
            "colors",
            "tab10",
            tooltip="overlay: a palette name (default, tab10, pastel, neon) or hex colours separated by "
            "commas; series i takes colour i, cycling",
        ),
    ]
    OUTPUTS = [
        Output(
            "IMAGE",
            "images",
            "one plot per series (or one with overlay), or per audio frame, in order; "
            "RGBA when the background has alpha",
        ),
        Output("MASK", "alpha", "the drawn lines', fills' and bars' opacity in each image, background not counted"),
    ]

    @classmethod
    def run(
        cls,
        series="",
        csv_series="rows",
        width=224,
        height=224,
        mode="antialiased",
        line_width=2.0,
        line_color="#FFFFFF",
        background="#000000",
        fill=False,
        fill_color="#FFFFFF40",
        scale="per_image",
        frames=48,
        audio=None,
        fps=0.0,
        audio_plot="waveform",
        fft_size=2048,
        bands=64,
        magnitude="dB",
        smoothing=0.5,
        style="line",
        overlay=False,
        colors="tab10",
    ):
        if audio is None:
            data = from_text(series, csv_series)
        elif audio_plot == "spectrum":
            data = from_audio_spectrum(audio, frames, fps, fft_size, bands, magnitude, smoothing, channels=overlay)
        else:
            data = from_audio(audio, frames, fps, channels=overlay)
        if not overlay:
            per_image, inks = 1, [parse_hex(line_color, "line_color")]
        else:
            per_image = data.batch if audio is None else audio["waveform"].shape[1]
            inks = series_colors(colors, per_image)
        fills = None
        if fill:
            fill_rgba = parse_hex(fill_color, "fill_color")
            fills = [fill_rgba] if not overlay else [ink[:3] + fill_rgba[3:] for ink in inks]
        images, alpha = render_series(
            data,
            height,
            width,
            per_image,
            style=style,
            mode=mode,
            line_width=line_width,
            scale=scale,
            colors=inks,
            fill_colors=fills,
            background=parse_hex(background, "background"),
            device=render_device(),
            on_progress=Progress(data.batch // per_image),
        )
        return images.to(intermediate_device()), alpha.to(intermediate_device())


NODES = [SeriesToImages]
