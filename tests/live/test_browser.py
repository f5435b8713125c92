"""The frontend in a real browser (`-m comfyui`): headless Chromium against a live ComfyUI server.

Needs COMFYUI_URL (see test_live_comfyui.py), Debian's chromium (/usr/bin/chromium or $CHROMIUM) and
the playwright Python package; skips with the reason otherwise. Screenshots go to output/browser/.
"""

import json
import os
import shutil
import time
import urllib.parse
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from test_live_comfyui import VIDEO, skip_without_core_nodes, upload, upload_example_assets

ROOT = Path(__file__).resolve().parents[2]
URL = os.environ.get("COMFYUI_URL", "").rstrip("/")
CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
WORKFLOWS = sorted((ROOT / "example_workflows").glob("*.json"))
SHOTS = ROOT / "output" / "browser"

pytestmark = [
    pytest.mark.comfyui,
    pytest.mark.skipif(not URL, reason="COMFYUI_URL is not set: no live ComfyUI server to test against"),
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"no Chromium at {CHROMIUM} (apt install chromium)"),
]

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
BOX_NODE = "window.app.graph._nodes.find(n => n.type === 'RasterKit_BoundingBoxRenderer')"
# JavaScript that empties the graph and defines make(type, x, y): a new node of that type at (x, y)
NEW_GRAPH = """const graph = window.app.graph, make = (type, x, y) => {
            const node = window.LiteGraph.createNode(type);
            node.pos = [x, y];
            graph.add(node);
            return node;
        };
        graph.clear();"""


@pytest.fixture(scope="module")
def page():
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright (the Python package)")
    upload_example_assets()  # the audio example's file, listed by Load Audio once it is in the input folder
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        page.errors = []  # errors raised in this pack's scripts (the frontend logs some of its own)
        page.on(
            "pageerror",
            lambda error: page.errors.append(error.stack) if "/extensions/rasterkit/" in (error.stack or "") else None,
        )
        page.goto(URL + "/", wait_until="domcontentloaded")
        page.wait_for_function("window.app && window.app.graph", timeout=60_000)
        yield page
        browser.close()


def history_ids():
    with urllib.request.urlopen(URL + "/history", timeout=30) as response:
        return set(json.load(response))


def wait_for_new_prompt(known, timeout=180):
    deadline = time.time() + timeout
    while time.time() < deadline:
        with urllib.request.urlopen(URL + "/history", timeout=30) as response:
            history = json.load(response)
        for prompt_id in set(history) - known:
            status = history[prompt_id]["status"]
            if status.get("completed") or status.get("status_str") == "error":
                return history[prompt_id]
        time.sleep(0.5)
    raise AssertionError("the queued workflow did not finish")


def output_images(entry):
    from PIL import Image

    images = []
    for output in entry["outputs"].values():
        for image in output.get("images", []):
            if image["filename"].endswith(VIDEO):
                continue
            query = urllib.parse.urlencode({k: image[k] for k in ("filename", "subfolder", "type")})
            with urllib.request.urlopen(f"{URL}/view?{query}", timeout=30) as response:
                images.append(np.asarray(Image.open(response).convert("RGB")))
    return images


def load(page, path):
    page.keyboard.press("Escape")  # the template dialog that greets a new user
    page.evaluate("workflow => window.app.loadGraphData(workflow)", json.loads(path.read_text()))
    page.wait_for_timeout(1000)


def queue_and_wait(page):
    known = history_ids()
    page.evaluate("window.app.queuePrompt(0, 1)")
    entry = wait_for_new_prompt(known)
    assert entry["status"]["status_str"] == "success", entry["status"].get("messages")
    return entry


def screenshot(page, name):
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    page.screenshot(path=path)
    from PIL import Image

    pixels = np.asarray(Image.open(path).convert("L"), dtype=np.float32)
    assert pixels.std() > 5, f"{path} looks blank"
    return path


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.stem)
def test_example_workflow_loads_and_runs_in_the_browser(page, path):
    load(page, path)
    types = page.evaluate("window.app.graph._nodes.map(n => n.type)")
    assert any(t.startswith("RasterKit_") for t in types)
    registered = page.evaluate("Object.keys(window.LiteGraph.registered_node_types)")  # frontend-only nodes too
    skip_without_core_nodes({str(i): {"class_type": t} for i, t in enumerate(types)}, registered)
    entry = queue_and_wait(page)
    assert output_images(entry), "no output image"
    screenshot(page, path.stem)
    assert not page.errors, page.errors


def test_box_editor_draws_a_box_with_the_mouse(page):
    load(page, ROOT / "example_workflows" / "01 Bounding boxes with labels.json")
    boxes_before = json.loads(page.evaluate(f"{BOX_NODE}.widgets.find(w => w.name === 'boxes').value"))
    queue_and_wait(page)  # the editor then shows the first frame at its real size (512x320)
    page.wait_for_timeout(500)
    # an empty area of the frame, below the two boxes of the example
    start = page.evaluate(f"{BOX_NODE}.rasterkitBoxEditor.toClient(300, 262)")
    end = page.evaluate(f"{BOX_NODE}.rasterkitBoxEditor.toClient(380, 310)")
    page.mouse.move(*start)
    page.mouse.down()
    page.mouse.move(*end, steps=6)
    page.mouse.up()
    boxes = json.loads(page.evaluate(f"{BOX_NODE}.widgets.find(w => w.name === 'boxes').value"))
    assert boxes[:-1] == boxes_before and len(boxes) == len(boxes_before) + 1
    x1, y1, x2, y2 = boxes[-1]
    assert abs(x1 - 300) < 3 and abs(y1 - 262) < 3 and abs(x2 - 380) < 3 and abs(y2 - 310) < 3
    screenshot(page, "box_editor")

    entry = queue_and_wait(page)
    drawn = output_images(entry)[0]  # the first SaveImage: the composite
    background = drawn[300, 200]
    top_edge = drawn[int(y1), int((x1 + x2) / 2)]
    assert np.abs(top_edge.astype(int) - background.astype(int)).max() > 40, "the new box is not in the output"

    # double-click deletes it again
    page.mouse.dblclick(*page.evaluate(f"{BOX_NODE}.rasterkitBoxEditor.toClient(340, 286)"))
    boxes = json.loads(page.evaluate(f"{BOX_NODE}.widgets.find(w => w.name === 'boxes').value"))
    assert boxes == boxes_before
    assert not page.errors, page.errors


def test_editor_preview_uses_the_node_palette(page):
    load(page, ROOT / "example_workflows" / "01 Bounding boxes with labels.json")
    page.wait_for_timeout(500)
    colours = page.evaluate(f"""(() => {{
        const editor = {BOX_NODE}.rasterkitBoxEditor;
        return editor.boxes().items.map((item, i) => editor.colour(item, i));
    }})()""")
    with urllib.request.urlopen(URL + "/rasterkit/palettes", timeout=30) as response:
        palette = json.load(response)["default"]
    import zlib

    assert colours == [palette[zlib.crc32(b"person") % len(palette)], palette[zlib.crc32(b"dog") % len(palette)]]


LINK_NODE = "window.app.graph._nodes.find(n => n.type === 'RasterKit_LineLinkRenderer')"


def set_widget(page, node, name, value):
    page.evaluate(
        f"""value => {{
        const widget = {node}.widgets.find(w => w.name === {json.dumps(name)});
        widget.value = value;
        widget.callback?.(value);
    }}""",
        value,
    )


def focus(page, node):
    """Zoom to 100% with the node at the top left: zoomed out, the frontend hides DOM widgets."""
    page.evaluate(f"""() => {{
        const node = {node}, ds = window.app.canvas.ds;
        ds.scale = 1;
        ds.offset = [80 - node.pos[0], 60 - node.pos[1]];
        window.app.canvas.setDirty(true, true);
    }}""")
    page.wait_for_timeout(500)


def focus_editor(page, node, editor):
    """focus(), then scroll the canvas up until the editor (below the node's widgets, which may reach
    past the viewport) starts near the top of the viewport."""
    focus(page, node)
    page.evaluate(f"""() => {{
        const top = {editor}.canvas.getBoundingClientRect().top, ds = window.app.canvas.ds;
        ds.offset = [ds.offset[0], ds.offset[1] - (top - 120)];  // below the frontend's bars
        window.app.canvas.setDirty(true, true);
    }}""")
    page.wait_for_timeout(500)


def tracks_json(page):
    return json.loads(page.evaluate(f"{LINK_NODE}.widgets.find(w => w.name === 'tracks_json').value"))


def canvas_pixel(page, editor, x, y):
    """RGB of the editor's canvas at image pixel (x, y)."""
    return page.evaluate(
        f"""([x, y]) => {{
        const editor = {editor};
        const [cx, cy] = editor.toClient(x, y);
        const rect = editor.canvas.getBoundingClientRect();
        const ratio = window.devicePixelRatio || 1;
        const data = editor.canvas.getContext('2d')
            .getImageData(Math.round((cx - rect.left) * ratio), Math.round((cy - rect.top) * ratio), 1, 1).data;
        return [data[0], data[1], data[2]];
    }}""",
        [x, y],
    )


def test_tracks_editor_adds_moves_and_deletes_points(page):
    load(page, ROOT / "example_workflows" / "03 Links between tracked points.json")
    page.evaluate(f"{LINK_NODE}.disconnectInput({LINK_NODE}.findInputSlot('tracks'))")  # type the points instead
    for name, value in (
        ("tracks_json", "[]"),
        ("color", "#FF00FF"),
        ("opacity", 1.0),
        ("width", 12.0),
        ("curve", "straight"),
        ("point_radius", 0.0),
        ("max_distance", 0.0),
    ):
        set_widget(page, LINK_NODE, name, value)
    queue_and_wait(page)  # the editor then shows the first frame at its real size
    editor = f"{LINK_NODE}.rasterkitTracksEditor"
    focus_editor(page, LINK_NODE, editor)
    width, height = page.evaluate(f"[{editor}.size().width, {editor}.size().height]")
    targets = [(0.25 * width, 0.3 * height), (0.7 * width, 0.35 * height), (0.5 * width, 0.7 * height)]
    for x, y in targets:
        page.mouse.click(*page.evaluate(f"{editor}.toClient({x}, {y})"))
    points = [track[0] for track in tracks_json(page)]  # each click adds a track of one point
    assert len(points) == 3
    for point, (x, y) in zip(points, targets, strict=False):
        assert abs(point["x"] - x) < 2 and abs(point["y"] - y) < 2

    # drag the third point down; it moves, nothing is added
    start = page.evaluate(f"{editor}.toClient({targets[2][0]}, {targets[2][1]})")
    end = page.evaluate(f"{editor}.toClient({targets[2][0]}, {0.8 * height})")
    page.mouse.move(*start)
    page.mouse.down()
    page.mouse.move(*end, steps=5)
    page.mouse.up()
    points = [track[0] for track in tracks_json(page)]
    assert len(points) == 3 and abs(points[2]["y"] - 0.8 * height) < 2 and abs(points[2]["x"] - targets[2][0]) < 2

    # the style preview draws the links the node will draw (k=3: all three pairs), in its colour
    middle = ((targets[0][0] + targets[1][0]) / 2, (targets[0][1] + targets[1][1]) / 2)
    screenshot(page, "tracks_editor")
    preview = np.array(canvas_pixel(page, editor, *middle))
    assert abs(preview - [255, 0, 255]).max() < 60, f"no link in the preview: {preview}"

    entry = queue_and_wait(page)
    drawn = output_images(entry)[0]  # the first frame of the saved animation
    scale = drawn.shape[1] / width
    pixel = drawn[int(middle[1] * scale), int(middle[0] * scale)].astype(int)
    assert abs(pixel - [255, 0, 255]).max() < 40, f"the link is not in the output: {pixel}"

    page.mouse.dblclick(*page.evaluate(f"{editor}.toClient({targets[1][0]}, {targets[1][1]})"))
    assert len(tracks_json(page)) == 2
    assert not page.errors, page.errors


def test_primitive_mesh_plays_its_build_up(page):
    load(page, ROOT / "example_workflows" / "09 Image rebuilt from shapes.json")
    queue_and_wait(page)
    player = "window.app.graph._nodes.find(n => n.type === 'RasterKit_PrimitiveMesh').rasterkitPlayer"
    page.wait_for_function(
        f"{player}.frames.length > 1 && {player}.picture.complete && {player}.picture.naturalWidth > 0"
    )
    frames = page.evaluate(f"{player}.frames.length")
    assert page.evaluate(f"Number({player}.slider.max)") == frames - 1
    assert page.evaluate(f"{player}.timer !== null"), "the build-up does not play"
    page.evaluate(f"""() => {{
        const slider = {player}.slider;
        slider.value = 0;
        slider.dispatchEvent(new Event('input'));
    }}""")
    assert page.evaluate(f"[{player}.index, {player}.timer, {player}.label.textContent]") == [0, None, f"1/{frames}"]
    first = page.evaluate(f"{player}.picture.src")
    page.evaluate(f"{player}.show({frames - 1})")
    assert page.evaluate(f"{player}.picture.src") != first
    screenshot(page, "primitive_player")
    assert not page.errors, page.errors


def test_load_mesh_uploads_a_file_and_selects_it(page):
    """The upload button's file picker sends the mesh to input/3d; the node's list then holds it, selected,
    and the workflow runs with it."""
    load(page, ROOT / "example_workflows" / "10 Mesh maps from six views.json")
    loader = "window.app.graph._nodes.find(n => n.type === 'RasterKit_LoadMesh')"
    assert page.evaluate(f"{loader}.widgets.some(w => w.name === 'upload mesh')")
    name = f"browser_upload_{int(time.time())}.obj"
    with page.expect_file_chooser() as chooser:
        page.evaluate(f"{loader}.widgets.find(w => w.name === 'upload mesh').callback()")
    chooser.value.set_files(
        files=[
            {
                "name": name,
                "mimeType": "text/plain",
                "buffer": (ROOT / "example_workflows" / "assets" / "rasterkit_torus.obj").read_bytes(),
            }
        ]
    )
    page.wait_for_function(f"{loader}.widgets.find(w => w.name === 'mesh_file').value === '3d/{name}'", timeout=30_000)
    assert page.evaluate(f"{loader}.widgets.find(w => w.name === 'mesh_file').options.values.includes('3d/{name}')")
    assert output_images(queue_and_wait(page))
    assert not page.errors, page.errors


PRIMITIVE_NODE = "window.app.graph._nodes.find(n => n.type === 'RasterKit_PrimitiveMesh')"


def test_primitive_mesh_seed_is_fixed_on_a_new_node(page):
    """The frontend gives a seed widget `control after generate = randomize`, which reruns the node on every
    queue; a new PrimitiveMesh starts at fixed, and a saved workflow's choice still wins."""
    load(page, ROOT / "example_workflows" / "09 Image rebuilt from shapes.json")
    control = "node => node.widgets.find(w => w.name === 'seed').linkedWidgets[0].value"
    assert (
        page.evaluate(f"""(() => {{
        const node = window.LiteGraph.createNode('RasterKit_PrimitiveMesh');
        window.app.graph.add(node);
        return ({control})(node);
    }})()""")
        == "fixed"
    )
    workflow = json.loads((ROOT / "example_workflows" / "09 Image rebuilt from shapes.json").read_text())
    mesh = next(n for n in workflow["nodes"] if n["type"] == "RasterKit_PrimitiveMesh")
    seed = mesh["widgets_values"].index("fixed")
    mesh["widgets_values"][seed] = "increment"
    page.evaluate("workflow => window.app.loadGraphData(workflow)", workflow)
    page.wait_for_timeout(500)
    assert page.evaluate(f"({control})({PRIMITIVE_NODE})") == "increment"


def test_primitive_mesh_run_moves_its_progress_bar_and_leaves_one_picture(page):
    """During the run the bar moves with the work (not full long before the end: the render, a third of
    the run on a CPU, has its share), the player is hidden (no empty box) and the live preview shows until
    the last shape; after it, the player alone shows the picture (the live preview is gone)."""
    load(page, ROOT / "example_workflows" / "09 Image rebuilt from shapes.json")
    set_widget(page, PRIMITIVE_NODE, "seed", time.time_ns() % 1_000_000)  # a new seed: not the cached result
    assert page.evaluate(f"{PRIMITIVE_NODE}.rasterkitPlayer.widget.hidden"), "an empty player before the first run"
    page.evaluate(f"""() => {{
        window.rasterkitEvents = [];
        const id = String({PRIMITIVE_NODE}.id);
        const api = window.app.api;
        api.addEventListener('progress_state', ({{ detail }}) => {{
            const state = detail.nodes[id];
            if (state) window.rasterkitEvents.push(['progress', performance.now(), state.value / state.max]);
        }});
        for (const kind of ['b_preview', 'b_preview_with_metadata'])
            api.addEventListener(kind, () => window.rasterkitEvents.push(['preview', performance.now()]));
    }}""")
    known = history_ids()
    page.evaluate("window.app.queuePrompt(0, 1)")
    hidden_while_running = []
    deadline = time.time() + 180
    while not (set(json.load(urllib.request.urlopen(URL + "/history", timeout=30))) - known):
        assert time.time() < deadline, "the run did not finish"
        if page.evaluate(f"{PRIMITIVE_NODE}.progress > 0"):
            hidden_while_running.append(page.evaluate(f"{PRIMITIVE_NODE}.rasterkitPlayer.widget.hidden"))
        page.wait_for_timeout(300)
    page.wait_for_function(f"{PRIMITIVE_NODE}.rasterkitPlayer.frames.length > 1")
    events = page.evaluate("window.rasterkitEvents")
    progress = [(t, fraction) for kind, t, *fraction in events if kind == "progress" for fraction in fraction]
    previews = [t for kind, t, *_ in events if kind == "preview"]
    fractions = [fraction for _, fraction in progress]
    assert len(set(fractions)) > 10 and fractions[-1] == 1, fractions
    # the end of the work the bar counts: the render's last chunk (saving the player's frames follows)
    start, end = progress[0][0], next(t for t, fraction in progress if fraction == 1)
    nearly_full = next(t for t, fraction in progress if fraction >= 0.95)
    assert (nearly_full - start) / (end - start) > 0.85, (
        f"the bar is 95% full at {(nearly_full - start) / 1000:.1f} s of {(end - start) / 1000:.1f} s"
    )
    assert previews and (previews[-1] - start) / (end - start) > 0.4, "live previews stop early"
    assert hidden_while_running and all(hidden_while_running), "the player box shows during the run"
    state = page.evaluate(f"""(() => {{
        const node = {PRIMITIVE_NODE};
        return [node.rasterkitPlayer.widget.hidden, node.widgets.some(w => w.name === '$$canvas-image-preview'),
                Boolean(node.imgs?.length), String(node.id) in (window.app.nodePreviewImages ?? {{}})];
    }})()""")
    assert state == [False, False, False, False], "player hidden, live preview widget, images, preview urls"
    focus(page, PRIMITIVE_NODE)
    screenshot(page, "primitive_one_picture")
    assert not page.errors, page.errors


def icon_pixels(page):
    """(lit pixels in the icon's middle column, in its left third) of the player's button icon."""
    return page.evaluate(f"""(() => {{
        const icon = {PRIMITIVE_NODE}.rasterkitPlayer.icon;
        const {{ width, height }} = icon;
        const data = icon.getContext('2d').getImageData(0, 0, width, height).data;
        const lit = (x, y) => data[4 * (y * width + x) + 3] > 128;
        let middle = 0, left = 0;
        for (let y = 0; y < height; y++) {{
            middle += lit(Math.floor(width / 2), y);
            for (let x = 0; x < width / 3; x++) left += lit(x, y);
        }}
        return [middle, left];
    }})()""")


def test_player_icons_are_drawn(page):
    """Play and pause are drawn on a canvas (the pause glyph shows as an empty box in Chromium): play, a
    triangle, is lit in its middle; pause, two bars, is not (the gap between them)."""
    load(page, ROOT / "example_workflows" / "09 Image rebuilt from shapes.json")
    set_widget(page, PRIMITIVE_NODE, "seed", time.time_ns() % 1_000_000)
    queue_and_wait(page)
    player = f"{PRIMITIVE_NODE}.rasterkitPlayer"
    page.wait_for_function(f"{player}.frames.length > 1 && {player}.timer !== null")
    middle, left = icon_pixels(page)
    assert middle == 0 and left > 0, "the pause icon is not two bars"
    assert page.evaluate(f"{player}.button.title") == "pause"
    focus(page, PRIMITIVE_NODE)
    screenshot(page, "primitive_player_pause")
    page.evaluate(f"{player}.button.click()")
    middle, left = icon_pixels(page)
    assert middle > 0 and left > 0 and page.evaluate(f"{player}.button.title") == "play", "no play triangle"
    screenshot(page, "primitive_player_play")
    assert not page.errors, page.errors


def test_editor_note_has_a_backdrop_on_a_light_image(page):
    """The points editor's note ("points come from the tracks input") is white on a dark backdrop, readable
    on a white frame."""
    load(page, ROOT / "example_workflows" / "03 Links between tracked points.json")
    editor = f"{LINK_NODE}.rasterkitTracksEditor"
    focus_editor(page, LINK_NODE, editor)
    page.evaluate(f"""() => {{
        const editor = {editor}, white = document.createElement('canvas');
        white.width = white.height = 8;
        const ctx = white.getContext('2d');
        ctx.fillStyle = '#fff';
        ctx.fillRect(0, 0, 8, 8);
        editor.image = white;
        editor.draw();
    }}""")
    assert page.evaluate(f"{editor}.tracks().note") == "points come from the tracks input"
    backdrop = page.evaluate(f"""(() => {{
        const editor = {editor}, fit = editor.fit(), ratio = window.devicePixelRatio || 1;
        const pixel = (x, y) => Array.from(editor.canvas.getContext('2d')
            .getImageData(Math.round((fit.x + x) * ratio), Math.round((fit.y + y) * ratio), 1, 1).data.slice(0, 3));
        const {{ width, height }} = editor.size();
        return [pixel(5, 5), pixel(width * fit.scale - 5, height * fit.scale - 5)];
    }})()""")
    assert max(backdrop[0]) < 100 and min(backdrop[1]) > 240, backdrop  # dark under the note, the white frame beside
    screenshot(page, "tracks_editor_note")
    assert not page.errors, page.errors


def test_line_link_renderer_hides_its_advanced_settings_behind_a_toggle(page):
    """36 widgets made the node 1080 px tall with its editor out of view: the advanced ones hide behind a
    button (the inputs and saved values stay as they are), and the editor is as wide as the node."""
    load(page, ROOT / "example_workflows" / "04 Link styles and trails.json")
    node = LINK_NODE
    values = page.evaluate(f"{node}.serialize().widgets_values")
    workflow = json.loads((ROOT / "example_workflows" / "04 Link styles and trails.json").read_text())
    saved = next(n for n in workflow["nodes"] if n["type"] == "RasterKit_LineLinkRenderer")["widgets_values"]
    assert values == saved
    shown = page.evaluate(f"{node}.widgets.filter(w => {node}.isWidgetVisible(w)).length")
    height = page.evaluate(f"{node}.size[1]")
    toggle = f"{node}.widgets.find(w => w.name === 'advanced settings')"
    assert shown < 16 and page.evaluate(f"{toggle}.label").startswith("show advanced settings (")
    focus(page, node)
    screenshot(page, "line_link_collapsed")
    editor = page.evaluate(
        f"(() => {{ const r = {node}.rasterkitTracksEditor.canvas.getBoundingClientRect(); "
        f"return [r.width, r.height]; }})()"
    )
    assert editor[0] >= page.evaluate(f"{node}.size[0]") - 30 and editor[1] >= 200, editor
    page.evaluate(f"{toggle}.callback()")
    page.wait_for_timeout(300)
    assert page.evaluate(f"{node}.widgets.filter(w => {node}.isWidgetVisible(w)).length") > 30
    assert page.evaluate(f"{node}.size[1]") > height + 400
    assert page.evaluate(f"{node}.serialize().widgets_values") == saved
    assert not page.errors, page.errors


def test_box_editor_draws_label_tabs_and_its_text_grows(page):
    load(page, ROOT / "example_workflows" / "01 Bounding boxes with labels.json")
    editor = f"{BOX_NODE}.rasterkitBoxEditor"
    focus_editor(page, BOX_NODE, editor)
    set_widget(
        page,
        BOX_NODE,
        "boxes",
        json.dumps([{"x1": 100, "y1": 200, "x2": 300, "y2": 400, "label": "cat", "color": "#00FF00"}]),
    )
    page.evaluate(f"{editor}.draw()")
    tab = canvas_pixel(page, editor, 102, 200 - 8)  # above the box's top left: the tab, in the box's colour
    assert abs(np.array(tab) - [0, 255, 0]).max() < 30, tab
    screenshot(page, "box_editor_tabs")
    text = f"{BOX_NODE}.widgets.find(w => w.name === 'boxes')"
    short = page.evaluate(f"{text}.computeLayoutSize({BOX_NODE}).minHeight")
    many = [{"x1": i, "y1": i, "x2": i + 50, "y2": i + 50, "label": f"box {i}"} for i in range(12)]
    set_widget(page, BOX_NODE, "boxes", json.dumps(many))
    page.evaluate(f"{editor}.fitText()")
    page.wait_for_timeout(500)
    wanted = page.evaluate(f"{text}.computeLayoutSize({BOX_NODE}).minHeight")
    assert wanted > short + 60 and page.evaluate(f"{text}.computedHeight") >= wanted, "the text area did not grow"
    assert not page.errors, page.errors


EDITOR_NODE = "window.app.graph._nodes.find(n => n.type === 'RasterKit_BoxEditor')"


def widget_json(page, node, name):
    return json.loads(page.evaluate(f"{node}.widgets.find(w => w.name === {json.dumps(name)}).value"))


def test_box_editor_node_draws_boxes_and_points_that_the_renderer_draws(page):
    """A Box Editor on an empty 320x240 image, its bounding_box into the Bounding Box Renderer: a box drawn
    with the mouse, a point by shift-click and a negative point by shift+alt-click land in the node's JSON
    at the mouse's image pixels, and the run draws the box."""
    page.keyboard.press("Escape")  # the template dialog that greets a new user
    registered = page.evaluate("Object.keys(window.LiteGraph.registered_node_types)")
    skip_without_core_nodes({"1": {"class_type": "EmptyImage"}, "2": {"class_type": "PreviewImage"}}, registered)
    page.evaluate(
        """() => {
        """
        + NEW_GRAPH
        + """
        const empty = make('EmptyImage', 0, 0), editor = make('RasterKit_BoxEditor', 300, 0);
        const renderer = make('RasterKit_BoundingBoxRenderer', 900, 0), preview = make('PreviewImage', 1300, 0);
        for (const node of [empty, editor]) {
            node.widgets.find(w => w.name === 'width').value = 320;
            node.widgets.find(w => w.name === 'height').value = 240;
        }
        empty.connect(0, editor, editor.findInputSlot('image'));
        empty.connect(0, renderer, renderer.findInputSlot('images'));
        editor.connect(0, renderer, renderer.findInputSlot('bounding_box'));
        renderer.connect(0, preview, 0);
        window.app.canvas.setDirty(true, true);
    }"""
    )
    queue_and_wait(page)  # the editor then shows the image's first frame
    editor = f"{EDITOR_NODE}.rasterkitBoxAndPointEditor"
    focus_editor(page, EDITOR_NODE, editor)
    assert page.evaluate(f"[{editor}.size().width, {editor}.size().height]") == [320, 240]

    page.mouse.move(*page.evaluate(f"{editor}.toClient(40, 50)"))
    page.mouse.down()
    page.mouse.move(*page.evaluate(f"{editor}.toClient(200, 150)"), steps=6)
    page.mouse.up()
    [box] = widget_json(page, EDITOR_NODE, "boxes")
    assert all(abs(got - wanted) < 3 for got, wanted in zip(box, [40, 50, 200, 150], strict=True)), box

    page.keyboard.down("Shift")
    page.mouse.click(*page.evaluate(f"{editor}.toClient(260, 200)"))
    page.keyboard.down("Alt")
    page.mouse.click(*page.evaluate(f"{editor}.toClient(280, 40)"))
    page.keyboard.up("Alt")
    page.keyboard.up("Shift")
    [point] = widget_json(page, EDITOR_NODE, "points")
    [negative] = widget_json(page, EDITOR_NODE, "negative_points")
    assert abs(point["x"] - 260) < 2 and abs(point["y"] - 200) < 2, point
    assert abs(negative["x"] - 280) < 2 and abs(negative["y"] - 40) < 2, negative
    assert widget_json(page, EDITOR_NODE, "boxes") == [box]  # the clicks added points, not boxes

    page.mouse.move(*page.evaluate(f"{editor}.toClient(100, 120)"))
    hover = page.evaluate(f"{editor}.hover")
    assert abs(hover[0] - 100) < 2 and abs(hover[1] - 120) < 2, hover
    screenshot(page, "box_editor_node")

    entry = queue_and_wait(page)
    drawn = output_images(entry)[0]
    x1, y1, x2, _y2 = box
    top_edge = drawn[round(y1), round((x1 + x2) / 2)]
    assert drawn[230, 310].max() < 10 and top_edge.max() > 60, "the drawn box is not in the renderer's output"

    page.mouse.dblclick(*page.evaluate(f"{editor}.toClient(260, 200)"))  # removes the point
    assert widget_json(page, EDITOR_NODE, "points") == []
    page.mouse.dblclick(*page.evaluate(f"{editor}.toClient(120, 100)"))  # removes the box
    assert widget_json(page, EDITOR_NODE, "boxes") == []
    assert not page.errors, page.errors


def test_templates_are_ordered_and_open_with_their_nodes_in_view(page):
    """The pack's cards come in the order of their names' index; each template opens zoomed to show all its
    nodes on a 1280x800 view, at 60% or more (below it LiteGraph leaves out the text)."""
    templates = page.evaluate("(async () => await window.app.api.getWorkflowTemplates())()")
    ours = next(names for names in templates.values() if any(name.startswith("01 ") for name in names))
    assert ours == [path.stem for path in WORKFLOWS]
    page.set_viewport_size({"width": 1280, "height": 800})
    try:
        for path in WORKFLOWS:
            load(page, path)
            scale, bounds = page.evaluate("""(() => {
                const ds = window.app.canvas.ds, title = window.LiteGraph.NODE_TITLE_HEIGHT;
                const box = window.app.graph._nodes.map(n => [
                    (n.pos[0] + ds.offset[0]) * ds.scale, (n.pos[1] - title + ds.offset[1]) * ds.scale,
                    (n.pos[0] + n.size[0] + ds.offset[0]) * ds.scale, (n.pos[1] + n.size[1] + ds.offset[1]) * ds.scale]);
                return [ds.scale, [Math.min(...box.map(b => b[0])), Math.min(...box.map(b => b[1])),
                                   Math.max(...box.map(b => b[2])), Math.max(...box.map(b => b[3]))]];
            })()""")  # noqa: E501
            screenshot(page, f"template {path.stem}")
            assert scale >= 0.6, (path.stem, scale)
            assert bounds[0] >= 40 and bounds[1] >= 40 and bounds[2] <= 1280 and bounds[3] <= 800, (path.stem, bounds)
    finally:
        page.set_viewport_size({"width": 1600, "height": 1000})


@pytest.mark.xfail(
    reason="headless Chromium frames Load3D's capture inconsistently: the scene PNG and the mask PNG of one "
    "captureScene call show Spot at different places and sizes (SwiftShader, ANGLE on Mesa's EGL, Vulkan SwiftShader "
    "alike), and neither puts camera_info's target, the fitted model's centre, at the image centre as a perspective "
    "camera looking at it must; the Mesh Rasterizer does (IoU with Load3D's mask output ~0.53). Needs a browser "
    "with a GPU",
    strict=False,
)
def test_load3d_and_the_mesh_rasterizer_show_the_same_view(page):
    """Issue 31: core Load3D's own render of Spot (three.js, WebGL in the browser) and the Mesh Rasterizer
    fed Load3D's camera_info, side by side in one screenshot: their silhouettes overlap (IoU > 0.9), the
    same framing."""
    page.keyboard.press("Escape")  # the template dialog that greets a new user
    registered = page.evaluate("Object.keys(window.LiteGraph.registered_node_types)")
    skip_without_core_nodes({"1": {"class_type": "Load3D"}, "2": {"class_type": "MaskToImage"}}, registered)
    upload("spot.glb", (ROOT / "example_workflows" / "assets" / "spot.glb").read_bytes())
    page.evaluate(
        """async () => {
        """
        + NEW_GRAPH
        + """
        const view = make('Load3D', 0, 0), load = make('RasterKit_LoadMesh', 0, 700);
        const raster = make('RasterKit_MeshRasterizer', 450, 0);
        const theirs = make('MaskToImage', 900, 0), ours = make('MaskToImage', 900, 300);
        const previews = [make('PreviewImage', 1150, 0), make('PreviewImage', 1150, 350)];
        const set = (node, name, value) => { node.widgets.find(w => w.name === name).value = value; };
        set(view, 'model_file', '3d/spot.glb');
        for (const node of [view, raster]) { set(node, 'width', 512); set(node, 'height', 512); }
        set(load, 'mesh_file', 'spot.glb');
        set(raster, 'antialias', false);
        load.connect(0, raster, raster.findInputSlot('mesh'));
        view.connect(view.findOutputSlot('camera_info'), raster, raster.findInputSlot('camera_info'));
        view.connect(view.findOutputSlot('mask'), theirs, 0);
        raster.connect(raster.findOutputSlot('mask'), ours, 0);
        theirs.connect(0, previews[0], 0);
        ours.connect(0, previews[1], 0);
        window.app.canvas.setDirty(true, true);
    }"""
    )
    view = "window.app.graph._nodes.find(n => n.type === 'Load3D')"
    page.wait_for_timeout(4000)  # the model loads into the viewer
    entry = queue_and_wait(page)
    focus(page, view)
    screenshot(page, "load3d_side_by_side")
    outputs = entry["outputs"]
    theirs, ours = (output_images({"outputs": {node: outputs[node]}})[0] for node in sorted(outputs, key=int)[-2:])
    a, b = theirs[..., 0] < 127, ours[..., 0] > 127  # Load3D's mask: the model black on white
    iou = (a & b).sum() / max((a | b).sum(), 1)
    assert a.sum() > 1000 and b.sum() > 1000, (a.sum(), b.sum())
    assert iou > 0.9, f"Load3D's silhouette and the Mesh Rasterizer's overlap by IoU {iou:.3f}"
    assert not page.errors, page.errors
