"""Queue every example workflow N times on a live ComfyUI server and count the successes (hardening:
the server keeps serving the examples after many runs). Start the server with --cache-none, so that
every run executes every node instead of answering from ComfyUI's cache:

    COMFYUI_URL=http://127.0.0.1:8188 .venv/bin/python tools/soak_live.py 100
"""

import json
import os
import sys
import time
import urllib.request
import uuid
from pathlib import Path

URL = os.environ.get("COMFYUI_URL", "http://127.0.0.1:8188").rstrip("/")
WORKFLOWS = sorted((Path(__file__).resolve().parents[1] / "tests" / "workflows").glob("*.api.json"))


def call(path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(URL + path, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.load(response)


def main(runs: int) -> int:
    failed = 0
    for path in WORKFLOWS:
        started, ids = time.time(), []
        for _ in range(runs):
            prompt = json.loads(path.read_text())
            ids.append(call("/prompt", {"prompt": prompt, "client_id": uuid.uuid4().hex})["prompt_id"])
        outcomes = []
        for prompt_id in ids:
            while True:
                entry = call(f"/history/{prompt_id}").get(prompt_id)
                if entry and entry.get("status", {}).get("completed") is not None:
                    outcomes.append(entry["status"]["status_str"])
                    break
                time.sleep(0.2)
        ok = outcomes.count("success")
        failed += runs - ok
        print(f"{path.name}: {ok}/{runs} succeeded in {time.time() - started:.0f} s")
    return failed


if __name__ == "__main__":
    sys.exit(1 if main(int(sys.argv[1]) if len(sys.argv) > 1 else 100) else 0)
