"""`make demo`: runs every node family on generated data and writes PNGs and MP4s into output/ (H.264,
with AAC sound where the demo plays audio: PyAV, from requirements-dev.txt).

The nodes are called as ComfyUI would call them (classmethod `run` with the node's inputs), without
ComfyUI, on the CPU or on the GPU that torch finds.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent
OUTPUT = ROOT / "output"
DEMOS = {}


def load_pack(name: str = "rasterkit"):
    """Import the repository root as a package, the way ComfyUI imports a custom node folder."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "__init__.py", submodule_search_locations=[str(ROOT)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def demo(name):
    def register(fn):
        DEMOS[name] = fn
        return fn

    return register


def save_png(image, path: Path) -> None:
    """image: float [H,W,C] or [H,W] in 0..1 (torch or numpy)."""
    import numpy as np
    from PIL import Image

    array = np.asarray(image.cpu() if hasattr(image, "cpu") else image)
    Image.fromarray((np.clip(array, 0, 1) * 255 + 0.5).astype(np.uint8)).save(path)


def save_mp4(frames, path: Path, fps: int = 24, audio: dict | None = None) -> None:
    """frames: float [T,H,W,3] in 0..1, written as H.264 in yuv420p (what browsers play; an odd height or
    width gets its last row or column repeated, as yuv420p needs even sizes). audio: ComfyUI's AUDIO
    ({"waveform": float [1,C,S] in -1..1, "sample_rate": int}, C 1 or 2) muxed as AAC, cut to the video's
    length."""
    import av
    import numpy as np

    array = (np.clip(np.asarray(frames.cpu()), 0, 1) * 255 + 0.5).astype(np.uint8)
    _, height, width, _ = array.shape
    array = np.pad(array, ((0, 0), (0, height % 2), (0, width % 2), (0, 0)), mode="edge")
    with av.open(str(path), "w", options={"movflags": "+faststart"}) as container:  # playable while loading
        video = container.add_stream("libx264", rate=fps, options={"crf": "18"})
        video.height, video.width, video.pix_fmt = array.shape[1], array.shape[2], "yuv420p"
        sound = None
        if audio is not None:
            rate = int(audio["sample_rate"])
            waveform = np.asarray(audio["waveform"][0].cpu(), dtype=np.float32)[:, : len(array) * rate // fps]
            sound = container.add_stream("aac", rate=rate, layout="stereo" if waveform.shape[0] == 2 else "mono")
        for frame in array:
            container.mux(video.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")))
        container.mux(video.encode())
        if sound is not None:
            samples = av.AudioFrame.from_ndarray(np.ascontiguousarray(waveform), format="fltp", layout=sound.layout)
            samples.sample_rate = rate
            container.mux(sound.encode(samples))
            container.mux(sound.encode())


def moving_scene(frames: int = 48, height: int = 360, width: int = 640):
    """A generated video: a gradient background with drifting blobs, float [T,H,W,3]."""
    import torch

    t = torch.arange(frames, dtype=torch.float32)[:, None, None]
    y = torch.arange(height, dtype=torch.float32)[None, :, None]
    x = torch.arange(width, dtype=torch.float32)[None, None, :]
    r = 0.25 + 0.2 * torch.sin(x / 97 + t / 11)
    g = 0.3 + 0.2 * torch.cos(y / 71 - t / 13)
    b = 0.45 + 0.15 * torch.sin((x + y) / 131 + t / 7)
    frames_rgb = torch.stack([r.expand(-1, height, -1), g.expand(-1, -1, width), b], dim=-1)
    for i, (cx, cy, rad) in enumerate([(160, 120, 50), (420, 220, 70), (520, 90, 35)]):
        px = cx + 40 * torch.sin(t / (9 + i))
        py = cy + 25 * torch.cos(t / (7 + i))
        blob = torch.exp(-((x - px) ** 2 + (y - py) ** 2) / (2 * rad**2))[..., None]
        frames_rgb = frames_rgb * (1 - 0.6 * blob) + 0.6 * blob * torch.tensor([0.9, 0.8 - 0.3 * i, 0.3 + 0.3 * i])
    return frames_rgb.clamp(0, 1).contiguous()


@demo("boxes")
def boxes_demo(pack, out: Path):
    """Tracked-object style boxes moving over a generated clip, labelled by class and id."""
    import json
    import math

    frames = moving_scene()
    per_frame = []
    for t in range(frames.shape[0]):
        per_frame.append(
            [
                {
                    "x1": 110 + 40 * math.sin(t / 9),
                    "y1": 70 + 25 * math.cos(t / 7),
                    "x2": 210 + 40 * math.sin(t / 9),
                    "y2": 170 + 25 * math.cos(t / 7),
                    "label": "blob",
                    "id": 1,
                    "score": 0.9,
                },
                {
                    "x1": 350 + 40 * math.sin(t / 10),
                    "y1": 150 + 25 * math.cos(t / 8),
                    "x2": 490 + 40 * math.sin(t / 10),
                    "y2": 290 + 25 * math.cos(t / 8),
                    "label": "blob",
                    "id": 2,
                    "score": 0.8,
                },
                {"x1": 480, "y1": 40, "x2": 600, "y2": 140, "label": "region", "id": 3},
            ]
        )
    node = pack.nodes.boxes.BoundingBoxRenderer
    image, alpha, _ = node.run(
        frames, boxes=json.dumps(per_frame), labels="label+id", color_by="id", fill_opacity=0.2, corner_radius=12
    )
    corners, _, _ = node.run(
        frames[:1],
        boxes=json.dumps(per_frame[0]),
        corner_length=18,
        stroke_width=4,
        fill_opacity=0.0,
        labels="all",
        palette="neon",
    )
    paths = [out / "boxes.png", out / "boxes_alpha.png", out / "boxes_corners.png", out / "boxes.mp4"]
    save_png(image[0], paths[0])
    save_png(alpha[0], paths[1])
    save_png(corners[0], paths[2])
    save_mp4(image, paths[3])
    return paths


@demo("series")
def series_demo(pack, out: Path):
    """Price-like random walks as a grid of filled plots, and an audio-reactive waveform video."""
    import torch

    generator = torch.Generator().manual_seed(7)
    walks = torch.cumsum(torch.randn(16, 200, generator=generator) + 0.03, 1)
    node = pack.nodes.series.SeriesToImages
    import json

    plots = node.run(
        series=json.dumps(walks.tolist()),
        width=256,
        height=160,
        line_color="#4FC3F7",
        background="#101820",
        fill=True,
        fill_color="#4FC3F740",
    )[0]
    framed = torch.nn.functional.pad(plots, (0, 0, 3, 3, 3, 3), value=0.85)  # a light border per plot
    grid = framed.reshape(4, 4, 166, 262, 3).permute(0, 2, 1, 3, 4).reshape(4 * 166, 4 * 262, 3)
    t = torch.linspace(0, 4, 4 * 24000)
    tone = torch.sin(2 * torch.pi * (220 + 110 * torch.sin(t)) * t) * (0.3 + 0.7 * torch.sin(t * 1.5).abs())
    audio = {"waveform": tone[None, None], "sample_rate": 24000}
    video = node.run(
        audio=audio, frames=96, width=640, height=240, scale="shared", line_color="#FFB74D", line_width=1.5
    )[0]
    paths = [out / "series.png", out / "series_audio.mp4"]
    save_png(grid, paths[0])
    save_mp4(video, paths[1], audio=audio)  # 96 frames at 24 fps: the tone's 4 s
    return paths


def textured_pan(frames: int = 48, height: int = 360, width: int = 640):
    """A generated video with texture to track: a slow diagonal pan over coloured noise, float [T,H,W,3]."""
    import torch

    generator = torch.Generator().manual_seed(5)
    noise = torch.rand(1, 3, height // 4 + 40, width // 4 + 60, generator=generator)
    texture = torch.nn.functional.interpolate(noise, scale_factor=4, mode="bicubic", align_corners=False)[0]
    texture = (0.15 + 0.6 * texture.clamp(0, 1)).permute(1, 2, 0)
    return torch.stack([texture[t * 2 // 3 : t * 2 // 3 + height, t : t + width] for t in range(frames)]).contiguous()


@demo("links")
def links_demo(pack, out: Path):
    """Corners tracked through a panning clip, linked to their nearest neighbours with curves."""
    frames = textured_pan()
    tracks, *_ = pack.nodes.links.PointTracker.run(frames, max_points=160, min_distance=18)
    image, _, _, _ = pack.nodes.links.LineLinkRenderer.run(
        frames * 0.6,
        tracks=tracks,
        tracks_json="",
        k=3,
        max_distance=110,
        degree_cap=4,
        hysteresis=1.4,
        curve="bezier",
        curvature=0.18,
        width=1.6,
        opacity=0.9,
        color="distance",
        point_radius=2.5,
    )
    paths = [out / "links.png", out / "links.mp4"]
    save_png(image[len(image) // 2], paths[0])
    save_mp4(image, paths[1])
    return paths


@demo("link_styles")
def link_styles_demo(pack, out: Path):
    """The same tracks as dashed marching-ant links with a colour gradient and glow, fading trails and
    diamond markers; beside them the Delaunay triangulation with its minimum spanning tree."""
    import torch

    frames = textured_pan(frames=24)
    tracks, *_ = pack.nodes.links.PointTracker.run(frames, max_points=90, min_distance=30)
    node = pack.nodes.links.LineLinkRenderer
    styled = node.run(
        frames * 0.45,
        tracks=tracks,
        tracks_json="",
        k=2,
        max_distance=140,
        width=2.0,
        opacity=0.95,
        color="#FFD54F",
        end_color="#E040FB",
        line_style="dashed",
        dash_length=10,
        gap_length=6,
        dash_speed=2,
        glow=0.35,
        glow_scale=3,
        point_style="diamond",
        point_radius=5,
        trail_frames=12,
        trail_smooth=True,
    )[0]
    triangulated = node.run(
        frames * 0.45,
        tracks=tracks,
        tracks_json="",
        graph="delaunay",
        width=1.0,
        opacity=0.35,
        color="#80DEEA",
        point_radius=0,
    )[0]
    tree = node.run(
        triangulated,
        tracks=tracks,
        tracks_json="",
        graph="mst",
        width=2.5,
        opacity=1.0,
        color="#FF7043",
        point_style="ring",
        point_radius=4,
    )[0]
    paths = [out / "link_styles.png", out / "link_styles.mp4"]
    save_png(torch.cat([styled[-1], tree[-1]], 1), paths[0])
    save_mp4(styled, paths[1], fps=12)
    return paths


@demo("box_styles")
def box_styles_demo(pack, out: Path):
    """Box markers (a turned, filled ellipse; a halo), a label anchored below its box and wrapped, and
    overlap avoidance."""
    import json

    frames = moving_scene(frames=1)
    boxes = [
        {"x1": 60, "y1": 70, "x2": 220, "y2": 190, "angle": 25, "label": "oriented, ellipse", "score": 0.9},
        {"x1": 250, "y1": 80, "x2": 400, "y2": 230, "label": "halo marker, label wrapped at 90 px", "score": 0.8},
        {"x1": 430, "y1": 60, "x2": 590, "y2": 300, "label": "overlapping", "score": 0.7},
        {"x1": 440, "y1": 70, "x2": 580, "y2": 290, "label": "moved below it", "score": 0.6},
    ]
    node = pack.nodes.boxes.BoundingBoxRenderer
    style = dict(labels="label", label_size=15, palette_colors="#FF7043, #4FC3F7, #AED581, #FFD54F")
    image = node.run(frames, boxes=json.dumps(boxes[:1]), marker="ellipse", stroke_width=3, fill_opacity=0.25, **style)[
        0
    ]
    image = node.run(
        image,
        boxes=json.dumps(boxes[1:2]),
        marker="halo",
        marker_size=14,
        label_max_width=90,
        label_anchor="bottom_center",
        fill_opacity=0.15,
        **style,
    )[0]
    image = node.run(
        image, boxes=json.dumps(boxes[2:]), label_avoid_overlap=True, fill_opacity=0.0, stroke_width=2, **style
    )[0]
    paths = [out / "box_styles.png"]
    save_png(image[0], paths[0])
    return paths


@demo("masks")
def masks_demo(pack, out: Path):
    """Per-object masks over the generated clip (two moving discs a frame, as SAM3 Video Track gives them):
    translucent fills, anti-aliased outlines, halos and ids, then each object's path as a track trail."""
    import torch

    frames = moving_scene(frames=24)
    count, height, width = frames.shape[0], frames.shape[1], frames.shape[2]
    t = torch.arange(count, dtype=torch.float32)[:, None]
    start = torch.tensor([[160.0, 120.0], [420.0, 220.0]])  # two objects' centres at frame 0
    xy = start + torch.stack([40 * torch.sin(t / torch.tensor([9.0, 10.0])), 25 * torch.cos(t / 7).expand(-1, 2)], 2)
    y, x = torch.meshgrid(torch.arange(height) + 0.5, torch.arange(width) + 0.5, indexing="ij")
    masks = ((x - xy[..., 0, None, None]) ** 2 + (y - xy[..., 1, None, None]) ** 2 < 55**2).float()  # [T,2,H,W]
    image = pack.nodes.masks.MaskRenderer.run(
        frames, masks=masks.reshape(-1, height, width), halo_width=18.0, outline_width=2.5, labels="id"
    )[0]
    tracks = {"xy": xy, "visible": torch.ones(count, 2, dtype=torch.bool)}
    image = pack.nodes.tracks.TrackTrails.run(image, rasterkit_tracks=tracks, trail_length=16, line_width=3.0)[0]
    paths = [out / "masks.png", out / "masks.mp4"]
    save_png(image[count - 1], paths[0])
    save_mp4(image, paths[1], fps=12)
    return paths


@demo("box_marks")
def box_marks_demo(pack, out: Path):
    """Supervision's looks on the Bounding Box Renderer: circle marks, score bars, traces of box centres,
    the inside of one box pixelated and everything outside the boxes dimmed."""
    import json
    import math

    frames = moving_scene(frames=24)
    per_frame = []
    for t in range(frames.shape[0]):
        x, y = 120 + 90 * math.sin(t / 6), 140 + 40 * math.cos(t / 5)
        per_frame.append(
            [
                {"x1": x, "y1": y, "x2": x + 110, "y2": y + 110, "id": 1, "label": "tracked", "score": 0.83},
                {"x1": 400, "y1": 90, "x2": 560, "y2": 250, "id": 2, "label": "private", "score": 0.41},
            ]
        )
    node = pack.nodes.boxes.BoundingBoxRenderer
    marks = dict(labels="label+score", bar="below", trace_frames=12, stroke_width=3.0, dim_outside=0.45)
    image = node.run(frames, boxes=json.dumps(per_frame), marker="circle", fill_opacity=0.15, **marks)[0]
    private = [[box[1]] for box in per_frame]
    image = node.run(image, boxes=json.dumps(private), inside="pixelate", inside_size=16, stroke_width=2.0)[0]
    # supervision's triangle mark over the tracked box (over its label: a mark with no labels of its own)
    tracked = [[{**box[0], "y1": box[0]["y1"] - 26}] for box in per_frame]
    image = node.run(
        image, boxes=json.dumps(tracked), marker="triangle", marker_size=10, labels="none", color="#FFD54F"
    )[0]
    paths = [out / "box_marks.png", out / "box_marks.mp4"]
    save_png(image[-1], paths[0])
    save_mp4(image, paths[1], fps=12)
    return paths


def example_audio() -> dict:
    """The "Audio spectrum" example's audio as core's AUDIO: waveform float [1,C,N], sample_rate."""
    import wave

    import numpy as np
    import torch

    with wave.open(str(ROOT / "example_workflows" / "assets" / "rasterkit_chirp_chord.wav")) as file:
        pcm = np.frombuffer(file.readframes(file.getnframes()), "<i2").reshape(-1, file.getnchannels())
    return {"waveform": torch.from_numpy(pcm.T / np.float32(32768))[None], "sample_rate": file.getframerate()}


@demo("spectrum")
def spectrum_demo(pack, out: Path):
    """The audio of the "Audio spectrum" example as a spectrum per video frame at 24 frames per second: bars
    on log frequencies, the left channel (a struck chord) and the right one (a rising sweep) overlaid."""
    audio = example_audio()
    video = pack.nodes.series.SeriesToImages.run(
        audio=audio,
        fps=24,
        audio_plot="spectrum",
        style="bars",
        bands=48,
        smoothing=0.6,
        scale="shared",
        overlay=True,
        colors="#FF7043, #4DD0E1",
        width=640,
        height=240,
        background="#101820",
    )[0]
    paths = [out / "spectrum.png", out / "spectrum.mp4"]
    save_png(video[len(video) // 2], paths[0])
    save_mp4(video, paths[1], audio=audio)
    return paths


@demo("looks")
def looks_demo(pack, out: Path):
    """The peers' looks: the "Audio spectrum" audio as a radial visualiser (log bands around a circle,
    mirrored inside, a gradient along each bar, falling peak caps); a plexus over the panning clip
    (links fading and thinning with length, coloured from their two points); spiral links pulsing along
    their length under electric ones."""
    audio = example_audio()
    radial = pack.nodes.series.SeriesToImages.run(
        audio=audio,
        fps=24,
        audio_plot="spectrum",
        style="bars",
        bands=64,
        smoothing=0.5,
        scale="shared",
        width=360,
        height=360,
        background="#0B1020",
        layout="radial",
        mirror="reflection",
        gradient="#00E5FF, #7C4DFF, #FF4081",
        peak_fall=0.02,
    )[0]
    frames = textured_pan(frames=24)
    tracks, *_ = pack.nodes.links.PointTracker.run(frames, max_points=120, min_distance=24)
    plexus = pack.nodes.links.LineLinkRenderer.run(
        frames * 0.3,
        tracks=tracks,
        tracks_json="",
        k=4,
        max_distance=160,
        hysteresis=1.3,
        degree_cap=4,
        width=1.5,
        opacity=0.9,
        color="points",
        palette="neon",
        point_radius=2.0,
        glow=0.4,
        length_falloff=1.0,
        falloff_on="opacity and width",
    )[0]
    # ys-vision-tools' looks: spiral links pulsing along their length, and electric links with a glow
    links = dict(tracks=tracks, tracks_json="", k=2, max_distance=140, width=2.0, point_radius=2.0, dash_speed=2.0)
    spirals = pack.nodes.links.LineLinkRenderer.run(
        frames * 0.3, curve="spiral", curvature=0.3, line_style="pulsing", color="#80DEEA", **links
    )[0]
    electric = pack.nodes.links.LineLinkRenderer.run(
        spirals, line_style="electric", dash_length=10.0, color="#B388FF", glow=0.5, **{**links, "k": 1}
    )[0]
    paths = [out / "radial_spectrum.png", out / "radial_spectrum.mp4", out / "plexus.png", out / "plexus.mp4"]
    paths += [out / "spiral_electric.png", out / "spiral_electric.mp4"]
    save_png(radial[len(radial) // 2], paths[0])
    save_mp4(radial, paths[1], audio=audio)
    save_png(plexus[len(plexus) // 2], paths[2])
    save_mp4(plexus, paths[3])
    save_png(electric[len(electric) // 2], paths[4])
    save_mp4(electric, paths[5])
    return paths


@demo("mesh")
def mesh_demo(pack, out: Path):
    """The bundled mesh from the six texture-baking views: normal, depth, position and face-id maps and
    the Lambert-shaded render (anti-aliased, over grey)."""
    import torch

    mesh, _ = pack.nodes.mesh.LoadMesh.run("rasterkit_torus.obj")
    normal, depth, position, _, face_id, _, render, coverage = pack.nodes.mesh.MeshRasterizer.run(
        width=256, height=256, views="six", mesh=mesh, antialias=True
    )
    shaded = render + 0.25 * (1 - coverage[..., None])  # premultiplied over grey
    rows = [torch.cat(list(maps), 1) for maps in (normal, depth, position, face_id, shaded)]
    single = pack.nodes.mesh.MeshRasterizer.run(width=512, height=512, azimuth=35, elevation=25, mesh=mesh)[0]
    paths = [out / "mesh_six_views.png", out / "mesh_normal.png"]
    save_png(torch.cat(rows, 0), paths[0])
    save_png(single[0], paths[1])
    return paths


@demo("bake")
def bake_demo(pack, out: Path):
    """The bundled textured mesh (Keenan Crane's Spot) from the six texture-baking views, those views
    edited (inverted: a stand-in for an image model), baked back into its texture, and the baked mesh
    rendered from new angles. Rows: the views; the edited views; UV Maps' position map, the baked
    texture and four new views."""
    import torch

    mesh, _ = pack.nodes.mesh.LoadMesh.run("spot.glb")
    size = 256
    maps = pack.nodes.mesh.MeshRasterizer.run(
        width=size, height=size, views="six", projection="orthographic", mesh=mesh, shading="texture"
    )
    views, raster = maps[6], maps[5]
    edited = 1 - views
    position, _, _ = pack.nodes.bake.UVMaps.run(mesh, texture_size=size)
    texture, _, baked = pack.nodes.bake.BakeTexture.run(mesh, edited, raster, texture_size=1024)
    again = pack.nodes.mesh.MeshRasterizer.run(
        width=size,
        height=size,
        views="list",
        mesh=baked,
        shading="texture",
        antialias=True,
        view_list="150,20; 210,20; 90,10; 330,30",
    )[6]
    texture = torch.nn.functional.interpolate(texture.permute(0, 3, 1, 2), size=(size, size), mode="area")
    rows = [
        torch.cat(list(views), 1),
        torch.cat(list(edited), 1),
        torch.cat([position[0], texture[0].permute(1, 2, 0), *again], 1),
    ]
    paths = [out / "bake.png"]
    save_png(torch.cat(rows, 0), paths[0])
    return paths


@demo("primitive")
def primitive_demo(pack, out: Path):
    """A generated picture rebuilt from 80 triangles: the image, its SVG and the build-up as a video."""
    picture = moving_scene(frames=1)
    image, frames, svg, *_ = pack.nodes.primitives.PrimitiveMesh.run(
        picture, shapes=80, shape_type="triangle", candidates=500, working_size=192, output_size=640, seed=1
    )
    paths = [out / "primitive.png", out / "primitive.svg", out / "primitive.mp4"]
    save_png(image[0], paths[0])
    paths[1].write_text(svg)
    save_mp4(frames, paths[2], fps=12)
    return paths


def main(names=None) -> None:
    pack = load_pack()
    OUTPUT.mkdir(exist_ok=True)
    print(f"RasterKit demo: {len(pack.nodes.NODE_CLASSES)} nodes, output in {OUTPUT}")
    for name, fn in DEMOS.items():
        if names and name not in names:
            continue
        start = time.perf_counter()
        written = fn(pack, OUTPUT)
        seconds = time.perf_counter() - start
        paths = ", ".join(os.path.relpath(p, ROOT) for p in written)
        print(f"  {name:<12} {seconds:6.2f} s  -> {paths}")


if __name__ == "__main__":
    main(sys.argv[1:])
