#!/usr/bin/env bash
# Everything a GPU machine should tell us, in one command (issue 28):
#     tools/gpu_check.sh OUTDIR            # [--dry-run: list the steps and their commands, run nothing]
# Steps, each with its own timeout and log OUTDIR/<step>.log, results in OUTDIR/summary.txt:
#   environment  nvidia-smi, torch, CuPy, NVRTC and compute-sanitizer versions
#   gpu_tests    pytest -m gpu
#   kernels      every kernel's registers, shared and local memory (CuPy RawKernel attributes)
#   bench        bench/bench_gpu.py --quick, issue 28's targets as pass/fail
#   memcheck     compute-sanitizer memcheck over the kernel tests (torch's caching allocator off)
#   racecheck    compute-sanitizer racecheck over the kernel tests
# Needs only the repository and a Python with torch (CUDA), CuPy and pytest (${PYTHON:-python3}); no
# package index. Steps that need what the machine lacks (a GPU, CuPy, compute-sanitizer) are skipped
# with the reason. The timeouts add up to under 9 minutes.
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
DRY=0
if [ "${1:-}" = "--dry-run" ]; then DRY=1; shift; fi
OUT=${1:?usage: tools/gpu_check.sh [--dry-run] OUTDIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"
FAILED=0

note() { echo "$*" | tee -a "$SUMMARY"; }

# step NAME SECONDS SKIP_REASON COMMAND...: runs COMMAND under timeout unless SKIP_REASON is set
step() {
    local name=$1 seconds=$2 skip=$3 start rc status
    shift 3
    if [ -n "$skip" ]; then
        note "$(printf '%-12s skipped: %s' "$name" "$skip")"
        return
    fi
    if [ $DRY = 1 ]; then
        note "$(printf '%-12s would run (timeout %ss): %s' "$name" "$seconds" "$*")"
        return
    fi
    start=$(date +%s)
    # through bash -c, so that a step may be one of the functions below (exported)
    timeout --kill-after=10 "$seconds" bash -c '"$@"' "$name" "$@" > "$OUT/$name.log" 2>&1
    rc=$?
    case $rc in
        0) status=ok ;;
        124|137) status="TIMEOUT after ${seconds}s"; FAILED=1 ;;
        *) status="FAILED (exit $rc)"; FAILED=1 ;;
    esac
    note "$(printf '%-12s %s in %ss, log %s' "$name" "$status" "$(( $(date +%s) - start ))" "$name.log")"
}

note "tools/gpu_check.sh on $(hostname) at $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"

probe() { "$PY" - <<'EOF' 2>/dev/null
try:
    import torch
except ImportError:
    print("notorch")
    raise SystemExit
print("cuda" if torch.cuda.is_available() else "nocuda")
try:
    import cupy
    cupy.cuda.runtime.getDeviceCount()
    print("cupy")
except Exception:
    print("nocupy")
EOF
}
PROBE=$(probe)
NO_GPU=""; NO_CUPY=""; NO_SANITIZER=""
case $PROBE in
    *notorch*|"") NO_GPU="no torch under $PY" ;;
    *nocuda*) NO_GPU="no CUDA device (torch.cuda.is_available() is False)" ;;
esac
case $PROBE in *nocupy*|"") NO_CUPY="CuPy not importable under $PY or it finds no device" ;; esac
command -v compute-sanitizer > /dev/null || NO_SANITIZER="compute-sanitizer not on PATH"
[ -n "$NO_GPU" ] && NO_SANITIZER=$NO_GPU
KERNEL_SKIP=${NO_GPU:-$NO_CUPY}
# the kernel tests on the GPU (the `kernel` fixture's cuda runs); torch's caching allocator off, so that
# memcheck sees each tensor's own bounds
KERNEL_TESTS=(-m pytest -q -p no:cacheprovider -m "kernels and gpu" tests)

environment() {
    command -v nvidia-smi > /dev/null && nvidia-smi || echo "nvidia-smi: not found"
    "$PY" - <<'EOF'
import platform, torch
print("python", platform.python_version(), "torch", torch.__version__, "CUDA", torch.version.cuda,
      "device", torch.cuda.get_device_name() if torch.cuda.is_available() else "none")
try:
    import cupy
    from cupy.cuda import nvrtc
    print("cupy", cupy.__version__, "NVRTC", nvrtc.getVersion(), "runtime", cupy.cuda.runtime.runtimeGetVersion())
except Exception as error:
    print("cupy: not usable:", error)
EOF
    command -v compute-sanitizer > /dev/null && compute-sanitizer --version || echo "compute-sanitizer: not found"
}

kernel_attributes() {
    "$PY" - <<'EOF'
import sys
sys.path.insert(0, "tests")
import conftest  # noqa: F401  (loads the pack as `rasterkit`)
from test_nvrtc import kernel_sources
from rasterkit.utils.core import cuda
for key, (source, names) in kernel_sources().items():
    for name in sorted(names):
        a = cuda.kernel(source, name).attributes
        print(f"{key} {name}: {a['num_regs']} registers, {a['shared_size_bytes']} B shared, "
              f"{a['local_size_bytes']} B local, {a['max_threads_per_block']} threads per block at most")
EOF
}

export PY
export -f environment kernel_attributes
step environment 30 "" environment
step gpu_tests 120 "$NO_GPU" "$PY" -m pytest -q -p no:cacheprovider -m gpu tests
step kernels 40 "$KERNEL_SKIP" kernel_attributes
step bench 210 "$NO_GPU" "$PY" bench/bench_gpu.py --quick
step memcheck 90 "${NO_SANITIZER:-$NO_CUPY}" env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck \
    --leak-check no --error-exitcode 1 "$PY" "${KERNEL_TESTS[@]}"
step racecheck 40 "${NO_SANITIZER:-$NO_CUPY}" compute-sanitizer --tool racecheck --error-exitcode 1 "$PY" \
    "${KERNEL_TESTS[@]}"

if [ -f "$OUT/bench.log" ]; then
    note "targets (from bench.log):"
    sed -n '/^== Targets of issue 28/,$p' "$OUT/bench.log" | tail -n +2 | tee -a "$SUMMARY"
fi
note "$([ $FAILED = 0 ] && echo "done: no step failed" || echo "done: some step FAILED")"
exit $FAILED
