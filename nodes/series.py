"""RasterKit_SeriesToImages: one line plot per series (or per audio window), as an IMAGE batch."""
from __future__ import annotations

from ..utils import series as sources
from ..utils.colors import parse_hex
from ..utils.gpu_rendering import render_polylines
from ._comfy import Progress, intermediate_device, render_device
from ._schema import Bool, Combo, Float, Int, Output, RasterKitNode, Socket, String


class SeriesToImages(RasterKitNode):
    NODE_ID = "RasterKit_SeriesToImages"
    DISPLAY_NAME = "Series To Images (RasterKit)"
    CATEGORY = "RasterKit/plot"
    DESCRIPTION = ("Renders each series as a line plot, all at once: from JSON or CSV text, or from audio cut "
                   "into one window per frame (audio-reactive video). NaN or empty values leave a gap.")
    INPUTS = [
        String("series", "[[3, 1, 4, 1, 5, 9, 2, 6], [2, 7, 1, 8, 2, 8, 1, 8]]", multiline=True,
               tooltip="JSON list of lists (or one list), or CSV numbers; ignored when audio is connected"),
        Combo("csv_series", ("rows", "columns"), tooltip="CSV: one series per row or per column"),
        Int("width", 224, 8, 8192, 8, tooltip="width of every plot in pixels"),
        Int("height", 224, 8, 8192, 8, tooltip="height of every plot in pixels"),
        Combo("mode", ("antialiased", "aliased"), tooltip="aliased: 1 px Bresenham lines; antialiased: line_width"),
        Float("line_width", 2.0, 0.25, 64.0, 0.25, tooltip="line width in pixels (antialiased mode)"),
        String("line_color", "#FFFFFF", tooltip="hex colour of the line, #RRGGBB or #RRGGBBAA (AA: its opacity)"),
        String("background", "#000000", tooltip="hex colour behind the plot, #RRGGBB"),
        Bool("fill", False, tooltip="fill the area under the curve with fill_color"),
        String("fill_color", "#FFFFFF40", tooltip="hex colour under the curve when fill is on, #RRGGBBAA"),
        Combo("scale", ("per_image", "shared"), tooltip="min-max of each series, or of all of them"),
        Int("frames", 48, 1, 100000, tooltip="audio: number of windows, one image each"),
        Socket("audio", "AUDIO", optional=True,
               tooltip="plots the first clip's waveform instead of series: channels averaged, cut into "
                       "frames windows"),
    ]
    OUTPUTS = [Output("IMAGE", "images", "one plot per series, or per audio window, in order")]

    @classmethod
    def run(cls, series="", csv_series="rows", width=224, height=224, mode="antialiased", line_width=2.0,
            line_color="#FFFFFF", background="#000000", fill=False, fill_color="#FFFFFF40", scale="per_image",
            frames=48, audio=None):
        data = sources.from_audio(audio, frames) if audio is not None else sources.from_text(series, csv_series)
        images = render_polylines(data.values, height, width, lengths=data.lengths, mode=mode, line_width=line_width,
                                  scale=scale, color=parse_hex(line_color, "line_color"),
                                  background=parse_hex(background, "background")[:3],
                                  fill_color=parse_hex(fill_color, "fill_color") if fill else None,
                                  channels=3, device=render_device(), on_progress=Progress(data.batch))
        return (images.to(intermediate_device()),)


NODES = [SeriesToImages]
