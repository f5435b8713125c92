"""Build example_workflows/<name>.json (UI format, for ComfyUI's template browser) and <name>.jpg
(a thumbnail of its output: the first saved image, or an animation's middle frame) from
tests/workflows/<name>.api.json, against a live server:

    COMFYUI_URL=http://127.0.0.1:8188 .venv/bin/python tools/make_example_workflows.py [name ...]

The API files stay the source of truth (the live tests send them to /prompt); the UI files are
derived from them with the server's /object_info, which says each node's widget order.
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
                    query = urllib.parse.urlencode({k: image[k] for k in ("filename", "subfolder", "type")})
                    return get(f"/view?{query}")
            return None
        time.sleep(0.5)
    raise RuntimeError("the workflow did not finish")


def main(names):
    from PIL import Image

    object_info = json.loads(get("/object_info"))
    out = ROOT / "example_workflows"
    out.mkdir(exist_ok=True)
    for path in sorted((ROOT / "tests" / "workflows").glob("*.api.json")):
        name = path.name.split(".")[0]
        if names and name not in names:
            continue
        prompt = json.loads(path.read_text())
        (out / f"{name}.json").write_text(json.dumps(to_ui(prompt, object_info), indent=2) + "\n")
        png = run_and_fetch_image(prompt)
        if png:
            picture = Image.open(io.BytesIO(png))
            picture.seek(getattr(picture, "n_frames", 1) // 2)  # an animation's middle frame: trails, spectra under way
            thumbnail = picture.convert("RGB")
            thumbnail.thumbnail((512, 512))
            thumbnail.save(out / f"{name}.jpg", quality=88)
        print(f"{name}: example_workflows/{name}.json" + (f", {name}.jpg" if png else ", no image output"))


if __name__ == "__main__":
    main(sys.argv[1:])
