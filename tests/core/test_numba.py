"""The threading settings the pack makes for numba's loops and torch's OpenMP pool, where the user has
not made them (each checked in a fresh interpreter: both are read once per process)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBE = (
    "import json, os, sys; sys.path.insert(0, {root!r}); import runpy; runpy.run_path({script!r}); "
    "import utils.core.numba, numba; from numba.np.ufunc import parallel; parallel._launch_threads(); "
    "print(json.dumps([os.environ.get('OMP_WAIT_POLICY'), numba.threading_layer()]))"
)


def probe(**env) -> list:
    environment = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "NUMBA_THREADING_LAYER")}
    environment.update(env)
    code = PROBE.format(root=str(ROOT), script=str(ROOT / "prestartup_script.py"))
    out = subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "env, expected",
    [
        ({}, ["PASSIVE", "omp"]),
        ({"OMP_WAIT_POLICY": "ACTIVE", "NUMBA_THREADING_LAYER": "workqueue"}, ["ACTIVE", "workqueue"]),
        ({"NUMBA_THREADING_LAYER_PRIORITY": "workqueue omp tbb"}, ["PASSIVE", "workqueue"]),
    ],
    ids=["defaults", "the user's", "the user's priority"],
)
def test_passive_openmp_and_numbas_omp_layer_unless_the_user_chose(env, expected):
    assert probe(**env) == expected


def test_numbas_threads_leave_torchs_setting():
    """numba's OpenMP layer shares torch's OpenMP runtime and set its thread count when its threads
    started: torch's one thread became all of numba's, for torch and for the pack's loops alike."""
    code = (
        f"import sys; sys.path.insert(0, {str(ROOT)!r}); import torch; torch.set_num_threads(1); "
        "import utils.core.numba as N, numba; print(N.torch_threads(), torch.get_num_threads(), "
        "numba.get_num_threads(), N.torch_threads(), torch.get_num_threads())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["1"] * 5
