"""First-ever and warm run of each template on a local ComfyUI (issue 32): for each tests/workflows/*.api.json,
delete numba's cache of the pack's CPU loops, start ComfyUI, queue the template as soon as the server
answers (while the background warm-up compiles: what a new user sees) and time it to the end; then queue
it again in the same server (warm: loops compiled, --cache-none so that every node runs again).

The pack must be linked into $COMFYUI_DIR/custom_nodes (e.g. by comfyui-local.sh start), and no other
server may use the port. Loopback only.

    COMFYUI_DIR=$HOME/comfyui .venv/bin/python tools/first_run.py [PORT] [NAME_PART ...]
"""

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = sorted((ROOT / "tests" / "workflows").glob("*.api.json"))


def call(url, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url + path, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.load(response)
    except urllib.error.HTTPError as error:  # validation errors: a JSON body
        return json.load(error)


def clear_numba_cache() -> int:
    """Delete numba's cache files of the pack's loops (beside the sources); how many."""
    files = [*ROOT.glob("utils/**/__pycache__/*.nbi"), *ROOT.glob("utils/**/__pycache__/*.nbc")]
    for file in files:
        file.unlink()
    return len(files)


def timed(url, prompt) -> tuple[float, str]:
    """Seconds from queueing `prompt` to its end, and its status."""
    start = time.monotonic()
    answer = call(url, "/prompt", {"prompt": prompt, "client_id": uuid.uuid4().hex})
    if "prompt_id" not in answer:
        return 0.0, f"refused: {json.dumps(answer)[:200]}"
    while True:
        entry = call(url, f"/history/{answer['prompt_id']}").get(answer["prompt_id"])
        if entry and entry.get("status", {}).get("completed") is not None:
            return time.monotonic() - start, entry["status"]["status_str"]
        time.sleep(0.1)


def measure(comfyui: Path, port: int, path: Path) -> tuple[float, str, float, str]:
    url = f"http://127.0.0.1:{port}"
    clear_numba_cache()
    with open(comfyui / "first_run.log", "w") as log:
        server = subprocess.Popen(
            [str(comfyui / ".venv" / "bin" / "python"), "main.py", "--cpu", "--cache-none", "--listen", "127.0.0.1"]
            + ["--port", str(port), "--disable-auto-launch"],
            cwd=comfyui,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        while True:
            try:
                call(url, "/system_stats")
                break
            except OSError:
                assert server.poll() is None, "ComfyUI exited: see first_run.log"
                time.sleep(0.2)
        prompt = json.loads(path.read_text())
        first, first_status = timed(url, prompt)
        warm, warm_status = timed(url, prompt)
        return first, first_status, warm, warm_status
    finally:
        server.terminate()
        server.wait(60)


def main() -> None:
    comfyui = Path(os.environ["COMFYUI_DIR"])
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 8199
    chosen = [p for p in WORKFLOWS if not sys.argv[2:] or any(part in p.name for part in sys.argv[2:])]
    print("| template | first run (s) | warm run (s) |\n| --- | --- | --- |")
    for path in chosen:
        first, first_status, warm, warm_status = measure(comfyui, port, path)
        note = "" if first_status == warm_status == "success" else f" ({first_status}, {warm_status})"
        print(f"| {path.name.split('.')[0]} | {first:.1f} | {warm:.1f}{note} |", flush=True)


if __name__ == "__main__":
    main()
