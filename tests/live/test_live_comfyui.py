"""Against a real ComfyUI server with the pack installed (`-m comfyui`; skipped without COMFYUI_URL).

Start one with ../shared/tools/comfyui-local.sh (setup, then start), then:
  COMFYUI_URL=http://127.0.0.1:8188 COMFYUI_DIR=$HOME/comfyui .venv/bin/python -m pytest -m comfyui
"""

import copy
import io
import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

import pytest

from rasterkit.nodes import NODE_CLASSES

URL = os.environ.get("COMFYUI_URL", "").rstrip("/")
WORKFLOWS = sorted((Path(__file__).parents[1] / "workflows").glob("*.api.json"))  # named as the templates are titled
BOXES = Path(__file__).parents[1] / "workflows" / "01 Bounding boxes with labels.api.json"
MESH = Path(__file__).parents[1] / "workflows" / "10 Mesh maps from six views.api.json"
ASSETS = Path(__file__).parents[2] / "example_workflows" / "assets"
AUDIO = (".wav", ".flac")  # bundled files that core Load Audio reads from the input folder (the README says so)
SOUNDTRACKS = (".mp4",)  # bundled videos that core Load Video reads, for their audio
# what each example's saving nodes write (by title: the file name less its index): frames of an image batch or an animation; a video file counts one  # noqa: E501
SAVED_FRAMES = {
    "Audio spectrum": {"3": 72, "6": 1, "8": 72},  # 3 s of audio at fps 24
    "Bake a texture from views": {"6": 4, "7": 1, "8": 6},  # four new views, the texture, the six edited views
    "Bounding boxes with labels": {"3": 4, "5": 4},
    "Box labels and markers": {"6": 4},
    "Delaunay and spanning tree links": {"11": 8},
    "Image rebuilt from shapes": {"5": 1, "6": 40},  # 40 shapes, up to 60 build-up frames: one per shape
    "Line plots from numbers": {"2": 8, "4": 1},  # 8 series, then all 8 overlaid in one image
    "Link styles and trails": {"4": 24},
    "Links between tracked points": {"10": 8},
    "Mesh maps from six views": {"3": 6, "4": 6, "5": 6},
    "Radius links and point markers": {"5": 12},
    "Plexus with distance falloff": {"10": 8},
    "Trajectories of tracked points": {"10": 8},
    "Mask overlays from a mask batch": {"17": 1},
    "Boxes drawn in the Box Editor": {"5": 1},
    "Audio-reactive radial visualiser": {"4": 74, "6": 1},  # the soundtrack: 3.06 s (AAC pads its last frame) at fps 24
}
VIDEO = (".mp4", ".webm", ".mov", ".mkv")
EXAMPLE_SECONDS = 60  # the issue's bound for an example on the CPU
pytestmark = [
    pytest.mark.comfyui,
    pytest.mark.skipif(not URL, reason="COMFYUI_URL is not set: no live ComfyUI server to test against"),
]


def get(path):
    with urllib.request.urlopen(URL + path, timeout=30) as response:
        return json.load(response)


def queue(prompt):
    body = json.dumps({"prompt": prompt, "client_id": uuid.uuid4().hex}).encode()
    request = urllib.request.Request(URL + "/prompt", data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.load(response)
    except urllib.error.HTTPError as error:  # validation errors come back as 400 with a JSON body
        return json.load(error)


def wait(prompt_id, timeout=180):
    deadline = time.time() + timeout
    while time.time() < deadline:
        history = get(f"/history/{prompt_id}")
        if prompt_id in history and history[prompt_id].get("status", {}).get("completed") is not None:
            entry = history[prompt_id]
            if entry["status"].get("status_str") in ("success", "error"):
                return entry
        time.sleep(0.5)
    raise AssertionError(f"prompt {prompt_id} did not finish in {timeout} s")


@pytest.fixture(scope="module")
def object_info():
    return get("/object_info")


def skip_without_core_nodes(prompt, known):
    """Skip, saying which, where this server lacks a core node the workflow needs (core's audio nodes
    need a torchaudio that loads, which a CPU-only test server may not have); known: the node types it
    has (/object_info's keys)."""
    missing = sorted({entry["class_type"] for entry in prompt.values()} - set(known))
    if missing and not any(name.startswith("RasterKit_") for name in missing):
        pytest.skip(f"this ComfyUI has no {', '.join(missing)} (core nodes that failed to load: see its log)")


def upload_example_assets():
    """Put the bundled audio and its video into ComfyUI's input folder, where the examples' Load Audio and
    Load Video nodes find them."""
    for path in sorted(ASSETS.iterdir()):
        if path.suffix in AUDIO + SOUNDTRACKS:
            assert upload(path.name, path.read_bytes(), subfolder="")["name"] == path.name


def fetch(image):
    with urllib.request.urlopen(
        f"{URL}/view?{urllib.parse.urlencode({k: image[k] for k in ('filename', 'subfolder', 'type')})}", timeout=30
    ) as response:
        return response.read()


def saved_frames(data, filename):
    """Frames in a saved file (a video counts one), and whether its first frame shows more than one flat colour."""
    import numpy as np
    from PIL import Image

    if filename.endswith(VIDEO):
        return 1, len(data) > 1000
    picture = Image.open(io.BytesIO(data))
    first = np.asarray(picture.convert("RGBA"), dtype=np.float32)
    return getattr(picture, "n_frames", 1), bool(first.std() > 2)


@pytest.mark.parametrize("node", NODE_CLASSES, ids=lambda n: n.NODE_ID)
def test_node_is_listed_with_its_inputs(object_info, node):
    assert node.NODE_ID in object_info, f"{node.NODE_ID} missing: did the pack fail to import? see the server log"
    info = object_info[node.NODE_ID]
    listed = {**info["input"]["required"], **info["input"].get("optional", {})}
    assert list(listed) == [s.name for s in node.INPUTS if not s.optional] + [s.name for s in node.INPUTS if s.optional]
    assert info["output"] == list(node.RETURN_TYPES) and info["output_name"] == list(node.RETURN_NAMES)


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name.split(".")[0])
def test_example_workflow_runs(object_info, path):
    """Each example runs in under a minute and every saving node writes the frames it should, not blank."""
    name = path.name.split(".")[0].split(" ", 1)[1]  # the title, less the index
    assert name in SAVED_FRAMES, f"add {name}'s saving nodes and their frame counts to SAVED_FRAMES"
    prompt = json.loads(path.read_text())
    skip_without_core_nodes(prompt, object_info)
    upload_example_assets()
    answer = queue(prompt)
    assert "prompt_id" in answer and not answer.get("node_errors"), answer
    entry = wait(answer["prompt_id"])
    messages = entry["status"].get("messages", [])
    assert entry["status"]["status_str"] == "success", messages
    times = {kind: data.get("timestamp") for kind, data in messages}
    assert (times["execution_success"] - times["execution_start"]) / 1000 < EXAMPLE_SECONDS, messages
    saved = {node: output["images"] for node, output in entry["outputs"].items() if output.get("images")}
    assert set(saved) == set(SAVED_FRAMES[name]), f"{name}: saving nodes {sorted(saved)}"
    for node, images in saved.items():
        counts = [saved_frames(fetch(image), image["filename"]) for image in images]
        assert sum(frames for frames, _ in counts) == SAVED_FRAMES[name][node], (name, node, counts)
        assert all(shows for _, shows in counts), f"{name}: node {node} saved a blank frame"
    if os.environ.get("COMFYUI_DIR"):
        for image in (image for images in saved.values() for image in images):
            if image.get("type") == "output":
                file = Path(os.environ["COMFYUI_DIR"], "output", image.get("subfolder", ""), image["filename"])
                assert file.is_file() and file.stat().st_size > 0, file


@pytest.mark.parametrize("outputs", [None, "image only"])
def test_boxes_without_the_newer_outputs_input_or_with_the_image_only(outputs):
    """A prompt saved before the optional `outputs` input existed still runs; "image only" gives the same
    image with 1x1 blanks for alpha and layer."""
    prompt = json.loads(BOXES.read_text())
    node = next(key for key, entry in prompt.items() if entry["class_type"] == "RasterKit_BoundingBoxRenderer")
    del prompt[node]["inputs"]["outputs"]
    if outputs:
        prompt[node]["inputs"]["outputs"] = outputs
    answer = queue(prompt)
    assert "prompt_id" in answer and not answer.get("node_errors"), answer
    entry = wait(answer["prompt_id"])
    assert entry["status"]["status_str"] == "success", entry["status"].get("messages")


def test_bad_input_is_a_clear_error_and_the_server_survives():
    prompt = json.loads(BOXES.read_text())
    bad = copy.deepcopy(prompt)
    bad["2"]["inputs"]["boxes"] = "[[1, 2, 3"
    entry = wait(queue(bad)["prompt_id"])
    assert entry["status"]["status_str"] == "error"
    errors = [m[1] for m in entry["status"]["messages"] if m[0] == "execution_error"]
    assert errors and "boxes: not valid JSON" in errors[0]["exception_message"]
    assert errors[0]["node_type"] == "RasterKit_BoundingBoxRenderer"
    good = wait(queue(prompt)["prompt_id"])  # still serving
    assert good["status"]["status_str"] == "success"


def ui_to_api(workflow, object_info):
    """The API prompt a UI-format workflow stands for (widgets in /object_info order)."""
    sources = {link[0]: (str(link[1]), link[2]) for link in workflow["links"]}
    prompt = {}
    for node in workflow["nodes"]:
        info = object_info[node["type"]]
        linked = {i["name"]: sources[i["link"]] for i in node["inputs"] if i.get("link") is not None}
        values = iter(node["widgets_values"])
        inputs = {}
        for section in ("required", "optional"):
            for name, spec in info["input"].get(section, {}).items():
                widget = isinstance(spec[0], list) or spec[0] in ("INT", "FLOAT", "STRING", "BOOLEAN", "COMBO")
                if widget:
                    value = next(values)
                    if name in ("seed", "noise_seed"):
                        next(values)  # control_after_generate
                if name in linked:
                    inputs[name] = list(linked[name])
                elif widget:
                    inputs[name] = value
        prompt[str(node["id"])] = {"class_type": node["type"], "inputs": inputs}
    return prompt


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name.split(".")[0])
def test_template_browser_lists_the_ui_workflow(object_info, path):
    name = path.name.split(".")[0]
    templates = get("/api/workflow_templates")
    pack = next((pack for pack, names in templates.items() if name in names), None)
    assert pack is not None, f"{name} is not among the templates {templates}"
    ui = get(f"/api/workflow_templates/{pack}/{urllib.parse.quote(name)}.json")
    prompt = json.loads(path.read_text())
    skip_without_core_nodes(prompt, object_info)
    assert ui_to_api(ui, object_info) == prompt
    assert (Path(__file__).parents[2] / "example_workflows" / f"{name}.jpg").is_file()


def upload(name, data, subfolder="3d"):
    """POST a file to ComfyUI's upload route (what the Load Mesh button does); its answer."""
    boundary = uuid.uuid4().hex
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="{key}"\r\n\r\n{value}\r\n'.encode()
        for key, value in (("type", "input"), ("subfolder", subfolder), ("overwrite", "true"))
    ]
    parts.append(
        f'--{boundary}\r\nContent-Disposition: form-data; name="image"; filename="{name}"\r\n'
        f"Content-Type: application/octet-stream\r\n\r\n".encode()
        + data
        + b"\r\n"
    )
    body = b"".join(parts) + f"--{boundary}--\r\n".encode()
    request = urllib.request.Request(
        URL + "/upload/image", data=body, headers={"Content-Type": f"multipart/form-data; boundary={boundary}"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)


def load_mesh_prompt(mesh_file):
    prompt = json.loads(MESH.read_text())
    loader = next(key for key, node in prompt.items() if node["class_type"] == "RasterKit_LoadMesh")
    prompt[loader]["inputs"]["mesh_file"] = mesh_file
    return prompt


def outcome(prompt):
    """The error text a prompt ends with ('' when it ran)."""
    answer = queue(prompt)
    if "prompt_id" not in answer or answer.get("node_errors"):  # refused by validation
        return json.dumps([answer.get("error"), answer.get("node_errors")])
    entry = wait(answer["prompt_id"])
    errors = [m[1]["exception_message"] for m in entry["status"]["messages"] if m[0] == "execution_error"]
    return "" if entry["status"]["status_str"] == "success" else json.dumps(errors)


def test_load_mesh_reads_only_the_input_folder(object_info):
    """An uploaded mesh is listed and loads; absolute paths, .. and links out of the input folder do not
    load, and the answer does not tell an existing outside file from a missing one."""
    torus = (Path(__file__).parents[2] / "example_workflows" / "assets" / "rasterkit_torus.obj").read_bytes()
    assert get("/rasterkit/mesh_extensions")[0] == ".obj"
    stored = upload("live_upload.obj", torus)
    name = f"{stored['subfolder']}/{stored['name']}"
    kind, options = get("/object_info/RasterKit_LoadMesh")["RasterKit_LoadMesh"]["input"]["required"]["mesh_file"]
    assert name in (kind if isinstance(kind, list) else options["options"])  # V1 and V3 forms of a COMBO
    assert outcome(load_mesh_prompt(name)) == ""
    if not os.environ.get("COMFYUI_DIR"):
        pytest.skip("COMFYUI_DIR is not set: no outside file to try")
    root = Path(os.environ["COMFYUI_DIR"]).resolve()
    secret = root / "rasterkit_secret.obj"
    secret.write_bytes(torus)
    link = root / "input" / "3d" / "rasterkit_link.obj"
    link.unlink(missing_ok=True)
    link.symlink_to(secret)
    try:
        answers = {}
        for attempt in (
            str(secret),
            "../rasterkit_secret.obj",
            "3d/../../rasterkit_secret.obj",
            "3d/rasterkit_link.obj",
            str(root / "rasterkit_missing.obj"),
            "../rasterkit_missing.obj",
        ):
            text = outcome(load_mesh_prompt(attempt))
            assert text, f"{attempt} loaded"
            assert str(root / "input") not in text
            answers[attempt] = text.replace(json.dumps(attempt)[1:-1], "NAME").replace(attempt, "NAME")
        assert answers[str(secret)].replace("rasterkit_secret", "X") == answers[
            str(root / "rasterkit_missing.obj")
        ].replace("rasterkit_missing", "X")
        assert answers["../rasterkit_secret.obj"] == answers["../rasterkit_missing.obj"]
    finally:
        link.unlink(missing_ok=True)
        secret.unlink(missing_ok=True)
