"""tools/gpu_check.sh (the one command for a GPU machine) on a machine without a GPU: it goes end to end,
writes its summary and logs, and says which steps it skipped and why; bench_gpu.py's target verdicts."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU machine the script runs for minutes: run it by hand")
def test_gpu_check_runs_end_to_end_without_a_gpu_and_says_what_it_skipped(tmp_path):
    run = subprocess.run(
        [str(ROOT / "tools" / "gpu_check.sh"), str(tmp_path)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHON": sys.executable},
        timeout=120,
    )
    summary = (tmp_path / "summary.txt").read_text()
    assert run.returncode == 0, run.stdout + run.stderr
    assert "environment  ok" in summary and "torch" in (tmp_path / "environment.log").read_text()
    for step in ("gpu_tests", "kernels", "bench", "memcheck", "racecheck"):
        assert f"{step:<12} skipped: no CUDA device" in summary, summary
    assert "done: no step failed" in summary


def test_bench_targets_say_pass_or_fail_beside_the_figure(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import bench_gpu

    bench_gpu.VERDICTS.clear()
    assert bench_gpu.target("0.25", 0.3, "draw, ms") == "0.25 (< 0.3: pass)"
    assert bench_gpu.target("2,000,000", 1e6, "images/s", above=True).endswith("pass)")
    assert bench_gpu.target("0.6", 0.5, "draw, ms").endswith("FAIL)")
    assert bench_gpu.target("-", 0.5, "draw, ms") == "- (< 0.5: not measured)"
    assert bench_gpu.VERDICTS == [
        "pass: draw, ms < 0.3: 0.25",
        "pass: images/s > 1e+06: 2,000,000",
        "FAIL: draw, ms < 0.5: 0.6",
        "not measured: draw, ms < 0.5: -",
    ]
