"""Build example_workflows/<name>.json (UI format, for ComfyUI's template browser) and <name>.jpg
(a thumbnail of its output: the first saved image, or an animation's middle frame) from
tests/workflows/<name>.api.json, against a live server:

    COMFYUI_URL=http://127.0.0.1:8188 .venv/bin/python tools/make_example_workflows.py [--layout-only] [name ...]

The API files stay the source of truth (the live tests send them to /prompt); the UI files are
derived from them with the server's /object_info, which says each node's widget order. Names are
"NN Title": the index orders the template browser's cards. The nodes are laid out at the sizes the
frontend gives them (headless Chromium with the playwright package: /usr/bin/chromium or $CHROMIUM),
and each workflow opens zoomed to show them all on a CANVAS-sized view. --layout-only: the UI files
alone, the thumbnails kept.
"""

from __future__ import annotations

import io
import json
import os
import sys
import time
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
URL = os.environ.get("COMFYUI_URL", "http://127.0.0.1:8188").rstrip("/")
WIDGET_TYPES = {"INT", "FLOAT", "STRING", "BOOLEAN", "COMBO"}
SEED_NAMES = {"seed", "noise_seed"}  # the frontend adds a control_after_generate value after these
CANVAS = (1280, 800)  # the view a template opens in, px: a laptop's browser window
VIEW_MARGIN = (60, 100)  # px of that view under ComfyUI's side bar and top bars
TITLE_HEIGHT = 30  # px of a node's title bar, above its pos
GAP = 40  # px between nodes
PREVIEW_HEIGHT = 280  # px an output node (Save Image, ...) grows to when it shows its result
MIN_WIDTH = 300  # px of a node without an editor (the pack's editors keep their 380)
MIN_SCALE, MAX_SCALE = 0.6, 1.0  # below 0.6 LiteGraph draws nodes without their text


def get(path):
    with urllib.request.urlopen(URL + path, timeout=60) as response:
        return response.read()


def input_specs(info):
    """(name, type, options) of a node's inputs in the order the frontend lays out widgets."""
    for section in ("required", "optional"):
        for name, spec in info["input"].get(section, {}).items():
            kind = spec[0]
            options = spec[1] if len(spec) > 1 else {}
            yield name, ("COMBO" if isinstance(kind, list) else kind), options


def depths(prompt):
    """Column of each node: 0 for sources, else one more than its deepest input."""
    memo = {}

    def depth(node_id):
        if node_id not in memo:
            links = [v[0] for v in prompt[node_id]["inputs"].values() if isinstance(v, list)]
            memo[node_id] = 1 + max((depth(link) for link in links), default=-1)
        return memo[node_id]

    return {node_id: depth(node_id) for node_id in prompt}


def to_ui(prompt, object_info):
    nodes, links = [], []
    column_rows = {}
    columns = depths(prompt)
    outputs = {node_id: {} for node_id in prompt}  # node -> slot -> [link ids]
    for order, node_id in enumerate(sorted(prompt, key=lambda n: (columns[n], int(n)))):
        entry = prompt[node_id]
        info = object_info[entry["class_type"]]
        inputs, widgets = [], []
        for name, kind, options in input_specs(info):
            value = entry["inputs"].get(name)
            if isinstance(value, list) and len(value) == 2 and isinstance(value[0], str):
                link_id = len(links) + 1
                source, slot = value
                source_type = object_info[prompt[source]["class_type"]]["output"][slot]
                links.append([link_id, int(source), slot, int(node_id), len(inputs), source_type])
                outputs[source].setdefault(slot, []).append(link_id)
                socket = {"name": name, "type": kind, "link": link_id}
                if kind in WIDGET_TYPES:
                    socket["widget"] = {"name": name}
                inputs.append(socket)
                if kind in WIDGET_TYPES:
                    widgets.append(options.get("default"))
            elif kind in WIDGET_TYPES:
                widgets.append(value if name in entry["inputs"] else options.get("default"))
                if name in SEED_NAMES or options.get("control_after_generate"):
                    widgets.append("fixed")
            else:
                inputs.append({"name": name, "type": kind, "link": None})
        row = column_rows.get(columns[node_id], 0)
        column_rows[columns[node_id]] = row + 1
        nodes.append(
            {
                "id": int(node_id),
                "type": entry["class_type"],
                "pos": [60 + 420 * columns[node_id], 80 + 420 * row],
                "size": [380, 120 + 26 * len(widgets)],
                "flags": {},
                "order": order,
                "mode": 0,
                "inputs": inputs,
                "outputs": [],
                "properties": {"Node name for S&R": entry["class_type"]},
                "widgets_values": widgets,
            }
        )
    for node in nodes:
        info = object_info[node["type"]]
        node["outputs"] = [
            {"name": name, "type": kind, "links": outputs[str(node["id"])].get(slot, []), "slot_index": slot}
            for slot, (name, kind) in enumerate(zip(info["output_name"], info["output"], strict=True))
        ]
    return {
        "last_node_id": max(n["id"] for n in nodes),
        "last_link_id": len(links),
        "nodes": nodes,
        "links": links,
        "groups": [],
        "config": {},
        "extra": {},
        "version": 0.4,
    }


def frontend_sizes(workflows: list[dict]) -> list[dict]:
    """{node id: [width, height]} of each UI workflow's nodes as the frontend sizes them (its widgets, the
    pack's editors), read in headless Chromium."""
    from playwright.sync_api import sync_playwright

    chromium = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, headless=True, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": CANVAS[0], "height": CANVAS[1]})
        page.goto(URL + "/", wait_until="domcontentloaded")
        page.wait_for_function("window.app && window.app.graph", timeout=60_000)
        sizes = []
        for workflow in workflows:
            page.evaluate("workflow => window.app.loadGraphData(workflow)", workflow)
            page.wait_for_timeout(1000)  # the editors size themselves after the first draw
            page.evaluate(
                """minWidth => window.app.graph._nodes.forEach(node => {
                const editor = node.rasterkitBoxEditor ?? node.rasterkitTracksEditor ?? node.rasterkitPlayer;
                const width = Math.max(node.computeSize()[0], editor ? node.size[0] : minWidth);
                node.setSize([width, node.computeSize()[1]]);  // the height the widgets need at that width
            })""",
                MIN_WIDTH,
            )
            page.evaluate("window.app.canvas.draw(true, true)")  # lays the widgets out: a node grows to fit them
            sizes.append(page.evaluate("Object.fromEntries(window.app.graph._nodes.map(n => [n.id, [...n.size]]))"))
        browser.close()
    return sizes


def lay_out(ui: dict, prompt: dict, sizes: dict, object_info: dict) -> None:
    """Place the nodes of `ui` in order of depth (a node below or right of its inputs), stacked in columns, at
    the frontend's `sizes`, with the column height that shows them largest; then set the view (extra.ds)
    that shows them all in CANVAS, centred (scale MIN_SCALE..MAX_SCALE)."""
    columns = depths(prompt)
    order = sorted(ui["nodes"], key=lambda node: (columns[str(node["id"])], node["id"]))
    for node in order:
        width, height = sizes[str(node["id"])]
        if object_info.get(node["type"], {}).get("output_node"):  # room for the result it will show
            height = max(height, PREVIEW_HEIGHT)
        node["size"] = [round(width), round(height)]
    view = (CANVAS[0] - VIEW_MARGIN[0] - 2 * GAP, CANVAS[1] - VIEW_MARGIN[1] - 2 * GAP)
    tallest = max(node["size"][1] + TITLE_HEIGHT for node in order)
    best = None
    for column_height in range(tallest, sum(node["size"][1] + TITLE_HEIGHT + GAP for node in order) + GAP, 20):
        places, x, y, width = [], 0, 0, 0
        for node in order:  # by depth: a node below or right of its inputs
            height = node["size"][1] + TITLE_HEIGHT
            if y and y + height > column_height:
                x, y, width = x + width + GAP, 0, 0
            places.append((node, [x, y + TITLE_HEIGHT]))
            y += height + GAP
            width = max(width, node["size"][0])
        right = max(pos[0] + node["size"][0] for node, pos in places)
        bottom = max(pos[1] + node["size"][1] for node, pos in places)
        scale = min(MAX_SCALE, view[0] / right, view[1] / bottom)
        if best is None or scale > best[0] + 1e-6:
            best = (scale, places, right, bottom)
    scale, places, right, bottom = best
    for node, pos in places:
        node["pos"] = pos
    scale = max(MIN_SCALE, scale)
    # graph point p shows at (p + offset) * scale: the nodes centred in the view, below the bars
    offset = [
        (VIEW_MARGIN[0] + CANVAS[0]) / 2 / scale - right / 2,
        (VIEW_MARGIN[1] + CANVAS[1]) / 2 / scale - bottom / 2,
    ]
    ui["extra"] = {"ds": {"scale": round(scale, 4), "offset": [round(v, 1) for v in offset]}}


def run_and_fetch_image(prompt):
    body = json.dumps({"prompt": prompt, "client_id": uuid.uuid4().hex}).encode()
    request = urllib.request.Request(URL + "/prompt", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        prompt_id = json.load(response)["prompt_id"]
    for _ in range(600):
        history = json.loads(get(f"/history/{prompt_id}"))
        if prompt_id in history and history[prompt_id]["status"].get("completed"):
            outputs = history[prompt_id]["outputs"]
            for node_id in sorted(outputs, key=int):  # the first saving node is the main result, not a mask
                for image in outputs[node_id].get("images", []):
                    if image["filename"].endswith((".mp4", ".webm", ".mov", ".mkv")):  # a video: no picture
                        continue
                    query = urllib.parse.urlencode({k: image[k] for k in ("filename", "subfolder", "type")})
                    return get(f"/view?{query}")
            return None
        time.sleep(0.5)
    raise RuntimeError("the workflow did not finish")


def main(names, layout_only=False):
    from PIL import Image

    object_info = json.loads(get("/object_info"))
    out = ROOT / "example_workflows"
    out.mkdir(exist_ok=True)
    paths = [
        path
        for path in sorted((ROOT / "tests" / "workflows").glob("*.api.json"))
        if not names or path.name.split(".")[0] in names
    ]
    prompts = [json.loads(path.read_text()) for path in paths]
    # a server without a core node (e.g. Load Audio, without torchaudio) lays out the UI file there is
    workflows = [
        to_ui(prompt, object_info)
        if all(e["class_type"] in object_info for e in prompt.values())
        else json.loads((out / f"{path.name.split('.')[0]}.json").read_text())
        for path, prompt in zip(paths, prompts, strict=False)
    ]
    for path, prompt, ui, sizes in zip(paths, prompts, workflows, frontend_sizes(workflows), strict=False):
        name = path.name.split(".")[0]
        lay_out(ui, prompt, sizes, object_info)
        (out / f"{name}.json").write_text(json.dumps(ui, indent=2) + "\n")
        if layout_only:
            print(f"{name}: example_workflows/{name}.json")
            continue
        png = run_and_fetch_image(prompt)
        if png:
            picture = Image.open(io.BytesIO(png))
            picture.seek(getattr(picture, "n_frames", 1) // 2)  # an animation's middle frame: trails, spectra under way
            thumbnail = picture.convert("RGB")
            thumbnail.thumbnail((512, 512))
            thumbnail.save(out / f"{name}.jpg", quality=88)
        print(f"{name}: example_workflows/{name}.json" + (f", {name}.jpg" if png else ", no image output"))


if __name__ == "__main__":
    arguments = sys.argv[1:]
    main([a for a in arguments if a != "--layout-only"], layout_only="--layout-only" in arguments)
