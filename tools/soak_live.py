"""Soak a live ComfyUI server (loopback only) and count what fails: every example workflow, the hostile
memory prompts of issue 29 (each must end in a clear error, not take the server down) and the heavy
nodes' interrupt jobs of tests/live/test_live_interrupt.py (each idle within 5 s of /interrupt), in
rounds, until `--rounds` or `--minutes` is reached. With --pid, the server's RSS after the first round
and after the last (growth beyond noise is a leak). Start the server with --cache-none, so that every
run executes every node instead of answering from ComfyUI's cache:

    COMFYUI_URL=http://127.0.0.1:8188 .venv/bin/python tools/soak_live.py --rounds 3 --minutes 30 --pid PID

`tools/soak_live.py N` (the older form) queues every example N times at once and counts the successes.
"""

import argparse
import json
import os
import random
import sys
import time
import urllib.request
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
URL = os.environ.get("COMFYUI_URL", "http://127.0.0.1:8188").rstrip("/")
WORKFLOWS = sorted((ROOT / "tests" / "workflows").glob("*.api.json"))
sys.path.insert(0, str(ROOT / "tests" / "live"))
os.environ.setdefault("COMFYUI_URL", URL)
import test_live_interrupt as jobs  # noqa: E402  (the interrupt jobs; imports nothing of the pack)


def call(path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(URL + path, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.load(response)


def finished(prompt_id, timeout=600) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        entry = call(f"/history/{prompt_id}").get(prompt_id)
        if entry and entry.get("status", {}).get("completed") is not None:
            return entry["status"]
        time.sleep(0.2)
    raise TimeoutError(f"prompt {prompt_id} did not end in {timeout} s")


def _with(make, node: str, **inputs):
    """The interrupt job `make` (test_live_interrupt) with inputs of its `node` type replaced."""

    def prompt():
        built = make(0)
        next(n for n in built.values() if n["class_type"] == node)["inputs"].update(inputs)
        return built

    return prompt


# Prompts that once took gigabytes or the whole server (issue 29): each must now end in an error naming
# the input, in seconds; the soak counts any other outcome.
HOSTILE = {
    "label of 15,000 newlines": _with(
        jobs.bounding_box_renderer,
        "RasterKit_BoundingBoxRenderer",
        boxes=json.dumps([{"x1": 1, "y1": 1, "x2": 9, "y2": 9, "label": "\n" * 15000}]),
    ),
    "3 MB of boxes text": _with(
        jobs.bounding_box_renderer, "RasterKit_BoundingBoxRenderer", boxes=json.dumps([[1, 1, 9, 9]] * 220_000)
    ),
    "20 series at 8192^2": _with(
        jobs.series_to_images,
        "RasterKit_SeriesToImages",
        series=json.dumps([[0, 1, 0.5]] * 20),
        width=8192,
        height=8192,
    ),
    "200,000 views": _with(jobs.mesh_rasterizer, "RasterKit_MeshRasterizer", view_list="; ".join(["0,0"] * 200_000)),
}


def rss_mb(pid) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise ValueError(f"no VmRSS for process {pid}")


def soak_round(failures: list) -> None:
    known = set(call("/object_info"))
    for path in WORKFLOWS:
        prompt = json.loads(path.read_text())
        if {node["class_type"] for node in prompt.values()} - known:  # e.g. core audio nodes without torchaudio
            continue
        answer = call("/prompt", {"prompt": prompt, "client_id": uuid.uuid4().hex})
        status = finished(answer["prompt_id"])
        if status["status_str"] != "success":
            failures.append(f"{path.name}: {status['status_str']}")
    for name, make in HOSTILE.items():
        answer = jobs.queue(make())
        if "prompt_id" not in answer:  # refused by validation: fine too, if it names the input
            continue
        status = finished(answer["prompt_id"], timeout=120)
        errors = [m[1].get("exception_message", "") for m in status.get("messages", []) if m[0] == "execution_error"]
        if status["status_str"] != "error" or not errors:
            failures.append(f"hostile {name}: {status['status_str']}")
    for node, make in jobs.JOBS.items():
        seconds, status = jobs.interrupted(make(random.randrange(1000)))  # --cache-none: no warm-up to reuse
        print(f"  {node}: idle {seconds:.2f} s after /interrupt", flush=True)
        if seconds >= jobs.IDLE_SECONDS or status.get("status_str") != "error":
            failures.append(f"interrupt {node}: {seconds:.1f} s, {status.get('status_str')}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="?", type=int, help="older form: queue every example this many times")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--pid", type=int, help="the server's process id, for its RSS")
    args = parser.parse_args()
    if not URL.startswith(("http://127.0.0.1", "http://localhost")):
        raise SystemExit(f"COMFYUI_URL={URL}: the soak runs against a loopback server only")
    if args.runs:
        return queue_examples(args.runs)
    failures: list[str] = []
    start, rss = time.monotonic(), []
    if args.pid:
        print(f"server RSS before: {rss_mb(args.pid):.0f} MB", flush=True)
    for number in range(args.rounds):
        soak_round(failures)
        if args.pid:
            rss.append(rss_mb(args.pid))
        print(
            f"round {number + 1}: {len(failures)} failures so far, {time.monotonic() - start:.0f} s"
            + (f", server RSS {rss[-1]:.0f} MB" if rss else ""),
            flush=True,
        )
        if time.monotonic() - start > args.minutes * 60:
            break
    call("/system_stats")  # still answering
    if len(rss) > 1:
        print(f"server RSS after round 1: {rss[0]:.0f} MB, after round {len(rss)}: {rss[-1]:.0f} MB")
    print("\n".join(failures) or "no failures")
    return 1 if failures else 0


def queue_examples(runs: int) -> int:
    failed = 0
    for path in WORKFLOWS:
        started, ids = time.time(), []
        for _ in range(runs):
            prompt = json.loads(path.read_text())
            ids.append(call("/prompt", {"prompt": prompt, "client_id": uuid.uuid4().hex})["prompt_id"])
        outcomes = [finished(prompt_id)["status_str"] for prompt_id in ids]
        ok = outcomes.count("success")
        failed += runs - ok
        print(f"{path.name}: {ok}/{runs} succeeded in {time.time() - started:.0f} s")
    return failed


if __name__ == "__main__":
    sys.exit(main())
