"""PointTracker and LineLinkRenderer: results, formats, styles and bad input."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from rasterkit.nodes.links import LineLinkRenderer, PointTracker

ROOT = Path(__file__).resolve().parents[2]

IMAGES = torch.full((3, 64, 80, 3), 0.1)
TRIANGLE = "[[[10, 10]], [[60, 12]], [[30, 50]]]"


def render(**kw):
    kw.setdefault("point_radius", 0.0)
    return LineLinkRenderer.run(IMAGES, **kw)


def textured_pan(frames=8, step=(2, 1)):
    generator = torch.Generator().manual_seed(0)
    texture = torch.nn.functional.avg_pool2d(torch.rand(1, 3, 200, 240, generator=generator), 3, 1, 1)[0]
    texture = texture.permute(1, 2, 0)
    return torch.stack([torch.roll(texture, (t * step[1], t * step[0]), (0, 1))[20:140, 20:180] for t in range(frames)])


def test_tracker_follows_a_pan():
    tracks, tracks_json, _ = PointTracker.run(textured_pan(), max_points=60)
    xy, visible = tracks["xy"], tracks["visible"]
    assert visible.sum(1).min() >= 50  # the count stays near max_points
    both = visible[1:] & visible[:-1]
    motion = (xy[1:] - xy[:-1])[both]
    assert torch.allclose(motion.mean(0), torch.tensor([2.0, 1.0]), atol=0.05)
    assert len(json.loads(tracks_json)) == xy.shape[1]


def test_links_join_the_nearest_points():
    image, alpha, layer, edges_json = render(tracks_json=TRIANGLE, k=1)
    edges = json.loads(edges_json)
    # distances: 0-2 44.7, 1-2 48.4, 0-1 50.0
    assert len(edges) == 3 and edges[0] == [[0, 2], [1, 2]] and edges[0] == edges[2]
    midpoint = (20, 30)  # on the link between points 0 and 2
    assert alpha[0, midpoint[1], midpoint[0]] > 0.5 and alpha[0, 40, 70] == 0
    assert torch.allclose(image, IMAGES * (1 - alpha[..., None]) + layer[..., :3] * alpha[..., None], atol=1e-6)
    premultiplied = render(tracks_json=TRIANGLE, k=1, layer_alpha="premultiplied")[2]
    assert torch.allclose(image, IMAGES * (1 - alpha[..., None]) + premultiplied[..., :3], atol=1e-6)


def test_graph_modes():
    """Distances in TRIANGLE: 0-2 44.7, 1-2 48.4, 0-1 50.0."""
    edges = {
        graph: json.loads(
            render(tracks_json=TRIANGLE, k=1, graph=graph, max_distance=46.0 if graph == "radius" else 0.0)[3]
        )
        for graph in ("knn", "radius", "delaunay", "mst")
    }
    assert edges == {
        "knn": [[[0, 2], [1, 2]]] * 3,
        "radius": [[[0, 2]]] * 3,
        "delaunay": [[[0, 1], [0, 2], [1, 2]]] * 3,
        "mst": [[[0, 2], [1, 2]]] * 3,
    }
    alpha = render(tracks_json=TRIANGLE, graph="delaunay")[1]
    assert alpha[0, 11, 35] > 0.5  # the link 0-1, which no point's nearest neighbour makes
    assert json.loads(render(tracks_json=TRIANGLE, graph="mst", max_distance=46.0)[3]) == [[[0, 2]]] * 3
    assert json.loads(render(tracks_json=TRIANGLE, graph="delaunay", degree_cap=1)[3]) == [[[0, 2]]] * 3


def test_widgets_added_later_come_last():
    """Saved workflows list widget values by position: a widget added later goes after the older ones."""
    widgets = [spec.name for spec in LineLinkRenderer.INPUTS if not spec.optional and spec.type != "IMAGE"]
    assert widgets[-18:] == [
        "layer_alpha",
        "graph",
        "line_style",
        "dash_length",
        "gap_length",
        "dash_phase",
        "dash_speed",
        "end_color",
        "glow",
        "glow_scale",
        "width_by_length",
        "point_style",
        "marker_glow",
        "trail_frames",
        "trail_smooth",
        "point_labels",
        "text_size",
        "text_color",
    ]
    # optional widgets come after the required ones in the frontend's layout: new ones after "outputs"
    optional = [spec.name for spec in LineLinkRenderer.INPUTS if spec.optional and spec.type != "RASTERKIT_TRACKS"]
    assert optional[:6] == ["outputs", "length_falloff", "falloff_on", "palette", "groups", "edges"]
    graphs = next(spec.options for spec in LineLinkRenderer.INPUTS if spec.name == "graph")
    assert list(graphs) == ["knn", "radius", "delaunay", "mst", "voronoi", "edges"]  # new choices last too
    curves = next(spec.options for spec in LineLinkRenderer.INPUTS if spec.name == "curve")
    assert list(curves) == ["straight", "bezier", "cubic"]


def test_tracks_input_styles_and_points():
    xy = torch.tensor([[[10.0, 10.0], [60.0, 12.0], [30.0, 50.0]]]).expand(3, -1, -1)
    tracks = {"xy": xy, "visible": torch.ones(3, 3, dtype=torch.bool)}
    straight = render(tracks=tracks, k=2, color="#FF0000", opacity=1.0)[2]
    curved = render(tracks=tracks, k=2, curve="bezier", curvature=0.3, color="distance")[2]
    s_curved = render(tracks=tracks, k=2, curve="cubic", curvature=0.3, color="distance")[2]
    assert straight[0, 11, 35, 0] > 0.5 and straight[0, 11, 35, 1] == 0
    assert not torch.equal(straight, curved) and not torch.equal(curved, s_curved)
    dots = render(tracks=tracks, k=2, point_radius=4.0, opacity=1.0)[1]
    assert dots[0, 50, 30] > 0.99  # a point marker at (30, 50)


def test_a_connected_input_wins_over_the_text():
    """The tracks_json default must not block a connection (as the boxes text for box sockets)."""
    xy = torch.tensor([[[10.0, 10.0], [60.0, 12.0]]]).expand(3, -1, -1)
    tracks = {"xy": xy, "visible": torch.ones(3, 2, dtype=torch.bool)}
    default = next(spec.default for spec in LineLinkRenderer.INPUTS if spec.name == "tracks_json")
    assert json.loads(render(tracks_json=default, tracks=tracks, k=1)[3]) == [[[0, 1]]] * 3
    ys = [np.array([[10.0, 10.0], [60.0, 12.0]])] * 3
    assert json.loads(render(tracks_json=default, ys_tracks=ys, k=1)[3]) == [[[0, 1]]] * 3


def test_hidden_points_and_frames_without_points():
    _, alpha, _, edges_json = render(tracks_json="[[[10, 10], [-100, -100]], [[60, 12], [60, 12]], [[30, 50]]]", k=2)
    assert json.loads(edges_json)[1] == [[1, 2]]  # point 0 is hidden in frame 1
    _, alpha, _, edges_json = render(tracks_json="")
    assert alpha.sum() == 0 and json.loads(edges_json) == [[], [], []]


@pytest.mark.parametrize(
    "kw,message",
    [
        (dict(tracks_json="[[1, 2"), "tracks_json: not valid JSON"),
        (dict(tracks_json='[[{"x": NaN, "y": 1}]]'), "tracks_json: track 0 point 0 has a non-finite"),
        (dict(tracks_json=TRIANGLE, color="blue"), "color: expected a hex colour"),
        (
            dict(
                tracks_json="",
                ys_tracks=np.zeros((2, 2)),
                tracks={"xy": torch.zeros(1, 1, 2), "visible": torch.ones(1, 1)},
            ),
            "tracks: connect one of tracks and ys_tracks, got both",
        ),
        (dict(tracks_json="", tracks=np.zeros((2, 2))), "tracks: got ndarray, ys-vision-tools' TRACKS"),
        (dict(tracks_json="", ys_tracks=[np.zeros((2, 3))]), r"ys_tracks: frame 0 should be an array \[N,2\]"),
        (dict(tracks_json="", tracks={"xy": torch.zeros(2, 5), "visible": torch.ones(2)}), "tracks: xy"),
        (dict(tracks_json=TRIANGLE, k=0), "k: expected 1 to 1024"),
        (dict(tracks_json=TRIANGLE, graph="radius"), "max_distance: the radius graph needs a limit above 0"),
        (dict(tracks_json=TRIANGLE, graph="gabriel"), "graph: expected one of knn, radius, delaunay, mst, voronoi"),
        (dict(tracks_json=TRIANGLE, point_labels="name"), "point_labels: expected one of none, id, label, got 'name'"),
        (dict(tracks_json=TRIANGLE, falloff_on="color"), "falloff_on: expected one of opacity, width"),
        (dict(tracks_json=TRIANGLE, color="points", palette="rainbow"), "palette: expected one of default, tab10"),
        (dict(tracks_json=TRIANGLE, groups="0 | 1 | 7"), r"groups: 7 is not a range of the tracks' ids \(0 to 2"),
        (dict(tracks_json=TRIANGLE, groups="0, 1"), "groups: expected two or more groups"),
        (dict(tracks_json=TRIANGLE, graph="edges"), "edges: the pair 15-13 names a track past the 3 tracks"),
        (dict(tracks_json=TRIANGLE, graph="edges", edges="0-1, 1-3"), "edges: the pair 1-3 names a track past"),
        (dict(tracks_json=TRIANGLE, graph="edges", edges="0-1 1>2"), "edges: expected pairs of two different"),
        (dict(tracks_json=TRIANGLE, point_labels="id", text_color="white"), "text_color: expected a hex colour"),
        (
            dict(tracks_json='[[{"x": 1, "y": 2, "label": 7}]]', point_labels="label"),
            "tracks_json: track 0 point 0 label should be a string, got 7",
        ),
        (
            dict(tracks_json="", tracks={"xy": torch.ones(1, 2, 2), "visible": torch.ones(1, 2), "labels": [1, 2]}),
            "tracks: label 0 should be a string, got 1",
        ),
    ],
)
def test_bad_input_names_the_input(kw, message):
    with pytest.raises(ValueError, match=message):
        render(**kw)


def test_tracker_bad_input():
    with pytest.raises(ValueError, match="images: expected an IMAGE"):
        PointTracker.run(torch.zeros(10, 10))
    tracks, _, core = PointTracker.run(torch.zeros(2, 32, 32, 3))  # nothing to track: no points, no crash
    assert tracks["xy"].shape == (2, 0, 2) and core["track_path"].shape == (2, 0, 2)


def test_tracker_core_tracks_drive_wanmove():
    """core_tracks is core ComfyUI's TRACKS (comfy_extras/nodes_wanmove.py reads track_path float [T,N,2]
    and track_visibility bool [T,N]): the tracks seen in frame 0 (WanMove moves each from there), hidden
    points marked hidden where their track was last seen, never at (-100, -100) marked visible."""
    tracks, _, core = PointTracker.run(textured_pan(), max_points=60)
    xy, visible = tracks["xy"], tracks["visible"]
    path, seen = core["track_path"], core["track_visibility"]
    first = visible[0]
    assert path.dtype == torch.float32 and seen.dtype == torch.bool and path.shape == (8, int(first.sum()), 2)
    assert torch.equal(seen, visible[:, first]) and torch.equal(path[seen], xy[:, first][seen])
    assert (path >= 0).all() and not seen.all()  # some points are lost on the way: hidden, not at -100
    lost = (~seen).nonzero()[0]
    assert torch.equal(path[lost[0], lost[1]], path[lost[0] - 1, lost[1]])  # held where last seen
    _, alpha, _, _ = LineLinkRenderer.run(textured_pan(), tracks_json="", ys_tracks=core, k=2, point_radius=2.0)
    assert alpha.amax() > 0.5  # the same tracks draw on the TRACKS socket


def test_ys_tracks_on_one_frame_and_on_many():
    triangle = np.array([[10, 10], [60, 12], [30, 50]], np.float32)  # ys-vision-tools on one image: [N,2]
    _, alpha, _, edges_json = LineLinkRenderer.run(
        IMAGES[:1], tracks_json="", ys_tracks=triangle, k=1, point_radius=0.0
    )
    assert json.loads(edges_json) == [[[0, 2], [1, 2]]] and alpha[0, 30, 20] > 0.5
    assert torch.equal(alpha, render(tracks_json=TRIANGLE, k=1)[1][:1])
    per_frame = [triangle, triangle[:2], np.empty((0, 2), np.float32)]  # N changes; an empty frame
    _, alpha, _, edges_json = render(tracks_json="", ys_tracks=per_frame, k=1)
    assert json.loads(edges_json) == [[[0, 2], [1, 2]], [[0, 1]], []] and alpha[2].sum() == 0


def test_a_flat_list_of_points_is_one_point_moving():
    _, alpha, _, edges_json = render(
        tracks_json='[{"x": 10, "y": 10}, {"x": 40, "y": 30}]', point_radius=3.0, opacity=1.0
    )
    assert json.loads(edges_json) == [[], [], []]  # one point: nothing to link
    assert alpha[0, 10, 10] > 0.9 and alpha[0, 30, 40] == 0
    assert alpha[1, 10, 10] == 0 and alpha[1, 30, 40] > 0.9 and torch.equal(alpha[2], alpha[1])


def test_track_types_are_the_packs_own():
    assert PointTracker.RETURN_TYPES == ("RASTERKIT_TRACKS", "STRING", "TRACKS")
    optional = LineLinkRenderer.INPUT_TYPES()["optional"]
    assert optional["tracks"][0] == "RASTERKIT_TRACKS" and optional["ys_tracks"][0] == "TRACKS"
    for node in (PointTracker, LineLinkRenderer):
        assert all(spec.tooltip for spec in node.INPUTS), [spec.name for spec in node.INPUTS if not spec.tooltip]


@pytest.mark.parametrize("name", ["03 Links between tracked points", "06 Delaunay and spanning tree links"])
def test_links_workflow_uses_the_declared_types(name):
    workflow = json.loads((ROOT / "example_workflows" / f"{name}.json").read_text())
    nodes = {node["id"]: node for node in workflow["nodes"]}
    for link_id, source, slot, target, target_slot, link_type in workflow["links"]:
        declared = nodes[source]["outputs"][slot]["type"]
        assert link_type == declared == nodes[target]["inputs"][target_slot]["type"], link_id
    tracker = next(node for node in workflow["nodes"] if node["type"] == "RasterKit_PointTracker")
    assert [o["type"] for o in tracker["outputs"]] == list(PointTracker.RETURN_TYPES)
    inputs = {spec.name: spec.type for spec in LineLinkRenderer.INPUTS}
    for renderer in (node for node in workflow["nodes"] if node["type"] == "RasterKit_LineLinkRenderer"):
        assert all(i["type"] == inputs[i["name"]] for i in renderer["inputs"])


def test_text_at_points_skips_hidden_non_finite_and_missing_points():
    """NaN or infinite points of RASTERKIT_TRACKS are hidden: no marker, link or text; no points: no text."""
    xy = torch.tensor([[[10.0, 30.0], [math.nan, 20.0], [40.0, math.inf]]]).expand(3, 3, 2)
    tracks = {"xy": xy, "visible": torch.ones(3, 3, dtype=torch.bool)}
    _, alpha, _, edges = render(tracks=tracks, point_labels="id", opacity=1.0)
    assert json.loads(edges) == [[]] * 3 and torch.isfinite(alpha).all()
    assert alpha[:, :, :35].sum() > 5 and alpha[:, :, 35:].sum() == 0  # the "0" of the one finite point alone
    for empty in ("", "[]"):
        assert render(tracks_json=empty, point_labels="label", point_radius=3.0)[1].sum() == 0


@pytest.mark.parametrize("at", [(78.0, 32.0), (40.0, 1.0), (78.0, 1.0), (78.0, 63.0)], ids=str)
def test_point_ids_stay_inside_the_frame(at):
    """An id near an edge moves inside the frame, as box labels do: the whole text is drawn, near its point
    (the frame's edges cut ids that lay past them)."""
    hidden = [[[-100, -100]]] * 10  # points 0 to 9 are off the frame: invisible, no text

    def ink(x, y):
        tracks = json.dumps([*hidden, [[x, y]]])
        return render(tracks_json=tracks, point_labels="id", opacity=1.0, text_color="#FFFFFF")[1][0]

    whole, near_edge = ink(40.0, 32.0), ink(*at)
    rows, columns = (near_edge > 0).nonzero(as_tuple=True)
    assert whole.sum() > 10 and torch.isclose(near_edge.sum(), whole.sum())  # every pixel of "10"
    assert (columns - at[0]).abs().min() <= 4 and (rows - at[1]).abs().min() <= 4


def test_voronoi_graph_in_the_node():
    """The walls between the cells of the Delaunay pairs; edges_json lists the pairs whose wall is drawn."""
    _, alpha, _, edges = render(tracks_json=TRIANGLE, graph="voronoi", opacity=1.0)
    assert json.loads(edges) == [[[0, 1], [0, 2], [1, 2]]] * 3
    assert alpha[0, 10, 20] == 0 and alpha[0, 0, 35] > 0.5  # not the link 0-1: the wall across it, to the edge
    _, alpha, _, edges = render(tracks_json="[[[10, 10]], [[70, 50]]]", graph="voronoi", max_distance=20.0)
    assert json.loads(edges) == [[]] * 3 and alpha.sum() == 0  # the pair is beyond max_distance


def test_image_only_outputs_the_same_image_and_blanks():
    image, alpha, layer, edges = render(tracks_json=TRIANGLE, point_radius=3.0)
    only = render(tracks_json=TRIANGLE, point_radius=3.0, outputs="image only")
    assert torch.equal(only[0], image) and only[3] == edges
    assert only[1].shape == (3, 1, 1) and only[2].shape == (3, 1, 1, 4) and not only[1].any() and not only[2].any()


def test_links_pipeline_keeps_its_gpu_budget(monkeypatch):
    """Issue 28's budget for the whole pipeline per chunk of frames (kNN, Bezier links, markers, labels,
    draw), through the node on the torch path: two 4K frames, 200 tracked points (Point Tracker's
    default), one chunk, as a GPU runs it. Was 692 ops, 22 syncs, 9 uploads, 6 float64 ops, then 715 ops
    and 8 syncs with point text kept inside the frame, then 602, then 429 ops; now 399 ops (the issue's
    <= 400), 3 syncs (<= 3), 2 uploads, no float64. The syncs: edges_json's one readback, which brings the
    longest link's length with it (the bound that sizes the Bezier flattening on the host); draw's binning
    plan, read once by draw_overlay for both the draw memory estimate and every chunk's binning
    (compositor.draw_plan); and one read of the parsed visibility, host data that the counter counts
    though no device waits on it (link_layers.py). The uploads: the markers' and texts' table, the text
    atlas. The ops: draw() ~185 (compositor.py: the plan, binning and pair classes ~90, coverage ~65,
    compositing ~30), the kNN graph with hysteresis and its packing ~100 (graph.py, neighbours.py: one
    int64 key per candidate, distance bits over id, makes the k nearest one topk), building the
    primitives ~95 (the Bezier flattening ~20 in the power basis by Horner's rule, polylines ~20, markers
    and text ~25, concat and _make ~20), edges_json's readback and the links' ends ~15 (links.py), the
    track parsing ~5. The kNN search takes no sync: on a GPU, frames of up to BRUTE_FORCE_POINTS_GPU
    points take the [T,N,N] search (the grid, 2 syncs, is for larger frames)."""
    from opcount import OpCount
    from rasterkit.utils.core import device
    from rasterkit.utils.gpu_graph import neighbours

    monkeypatch.setenv("RASTERKIT_DISABLE_NUMBA", "1")
    monkeypatch.setenv("RASTERKIT_DISABLE_CUPY", "1")
    monkeypatch.setattr(device, "free_memory_bytes", lambda *a: 64 << 30)  # one chunk, however busy the machine
    monkeypatch.setattr(neighbours, "SEARCH_CHUNK_POINTS", 1 << 40)  # a GPU's search chunk (the CPU's are smaller)
    monkeypatch.setattr(neighbours, "BRUTE_FORCE_POINTS", neighbours.BRUTE_FORCE_POINTS_GPU)  # a GPU's search path
    generator = torch.Generator().manual_seed(0)
    images = torch.zeros(2, 2160, 3840, 3)
    xy = torch.rand(1, 200, 2, generator=generator) * torch.tensor([3840.0, 2160.0])
    tracks = {"xy": xy + torch.randn(2, 200, 2, generator=generator), "visible": torch.ones(2, 200, dtype=torch.bool)}
    options = dict(tracks=tracks, tracks_json="", k=3, curve="bezier", point_radius=3.0, point_labels="id")
    LineLinkRenderer.run(images[:, :64, :64], **options)  # first-call work (imports, font caches) aside
    with OpCount() as count:
        _, alpha, _, edges = LineLinkRenderer.run(images, **options)
    assert all(len(frame) > 200 for frame in json.loads(edges)) and alpha.amax() > 0.5
    assert count.launches <= 400 and count.syncs <= 3 and count.uploads <= 2 and count.float64 == 0, count.summary()


def test_plexus_inputs_at_their_defaults_draw_as_before():
    """The plexus inputs are optional (older prompts lack them): given at their defaults, or left out, the
    same image, alpha, layer and edges (bit for bit; the defaults' output is today's, checked against the
    commit before them when they came)."""
    options = dict(tracks_json=TRIANGLE, k=2, point_radius=3.0, point_labels="id", curve="bezier", glow=0.3)
    before = render(**options)
    after = render(**options, length_falloff=0.0, falloff_on="opacity", palette="default", groups="", edges="coco17")
    assert all(torch.equal(a, b) for a, b in zip(before[:3], after[:3], strict=True)) and before[3] == after[3]


def test_plexus_groups_edges_colours_and_falloff_in_the_node():
    square = "[[[10, 10]], [[30, 12]], [[12, 40]], [[34, 44]]]"
    edges = lambda **kw: json.loads(render(tracks_json=square, **kw)[3])  # noqa: E731
    assert edges(graph="delaunay", groups="0, 1 | 2, 3") == [[[0, 2], [1, 2], [1, 3]]] * 3  # not 0-1 nor 2-3
    assert edges(graph="edges", edges="[[3, 2], [0, 1]]") == [[[0, 1], [2, 3]]] * 3
    labelled = '[[{"x": 10, "y": 10, "label": "a"}], [{"x": 30, "y": 12, "label": "a"}], [[12, 40]], [[34, 44]]]'
    tracks_edges = json.loads(render(tracks_json=labelled, graph="delaunay", groups="labels")[3])
    assert tracks_edges == [[]] * 3  # one label: one group, and unlabelled tracks take no links
    _, alpha, layer, _ = render(tracks_json=square, graph="edges", edges="0-1", color="points", opacity=1.0, width=3.0)
    red, green = torch.tensor([0xE6, 0x19, 0x4B]) / 255, torch.tensor([0x3C, 0xB4, 0x4B]) / 255  # the default palette
    # 20.1 px: 3 steps of 8 px from red to green; x 28.5 is in the third, all the way
    assert torch.allclose(layer[0, 10, 12, :3], red, atol=0.02)
    assert torch.allclose(layer[0, 11, 28, :3], green, atol=0.02)
    faded = render(tracks_json=square, graph="delaunay", length_falloff=1.0, max_distance=40.0, opacity=1.0)[1]
    full = render(tracks_json=square, graph="delaunay", max_distance=40.0, opacity=1.0)[1]
    assert 0 < faded.sum() < full.sum() and faded[0, 25, 11] < 0.5 * full[0, 25, 11]  # the 0-2 link, 30 px of 40


@pytest.mark.parametrize(
    "style",
    [
        dict(curve="bezier", color="distance", glow=0.4, trail_frames=3, point_labels="id"),
        dict(
            line_style="dashed", dash_speed=3.0, end_color="#FF0000", width_by_length="longer_thicker", trail_frames=9
        ),
        dict(color="points", length_falloff=0.5, point_style="ring", trail_frames=2, trail_smooth=True),
    ],
)
def test_windows_of_frames_draw_as_one(style, monkeypatch):
    """A long video of a dense graph is built and drawn in windows of frames (issue 29: its primitives'
    memory bounded, interrupts between windows): the same image, alpha, layer and edges, bit for bit, as
    one window, with trails reaching back over a window's start, dashes marching with the batch's frames
    and colours scaled by the batch's longest link."""
    from rasterkit.nodes import links

    layers = links.link_layers
    generator = torch.Generator().manual_seed(3)
    xy = torch.rand(1, 12, 2, generator=generator) * 60 + torch.randn(10, 12, 2, generator=generator).cumsum(0)
    visible = torch.rand(10, 12, generator=generator) > 0.15
    images = torch.rand(10, 64, 64, 3, generator=generator)
    options = dict(tracks={"xy": xy, "visible": visible}, tracks_json="", k=3, point_radius=2.5, **style)
    whole = LineLinkRenderer.run(images, **options)
    monkeypatch.setattr(links, "WINDOW_ITEMS", 40)  # ~2 frames a window
    assert len(links.frame_windows(np.full(10, 12 + 3 * 12 // 2), 40)) > 3
    calls = []
    monkeypatch.setattr(links, "link_layers", lambda *a, **k: calls.append(a[0].shape[0]) or layers(*a, **k))
    windowed = LineLinkRenderer.run(images, **options)
    assert len(calls) > 3  # each given its frames and those its trails reach back to
    assert all(torch.equal(a, b) for a, b in zip(whole[:3], windowed[:3], strict=True)) and whole[3] == windowed[3]
