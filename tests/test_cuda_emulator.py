"""The CPU emulation of CUDA kernels (tests/cuda_emulator.py) keeps CUDA's meaning of shared memory and
barriers, so that the kernel tests that rely on it test what a GPU does. Fails without a compiler."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import cuda_emulator

SOURCE = r"""
typedef unsigned long long u64;

__device__ inline void block_barrier() { __syncthreads(); }

extern "C" __global__ void block_sums(const float* values, float* sums, int n) {
    __shared__ float partial[64];
    int t = threadIdx.x;
    int i = blockIdx.x * blockDim.x + t;
    partial[t] = i < n ? values[i] : 0.0f;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (t < stride) partial[t] += partial[t + stride];
        __syncthreads();
    }
    if (t == 0) sums[blockIdx.x] = partial[0];
}

/* each round every thread takes its left neighbour's value of the round before, plus one */
extern "C" __global__ void ring_rounds(int* out, int rounds) {
    __shared__ int value[32];
    int t = threadIdx.x, n = blockDim.x;
    value[t] = t + 100 * blockIdx.x;
    block_barrier();  /* through a device function */
    for (int r = 0; r < rounds; ++r) {
        int left = value[(t + n - 1) % n];
        __syncthreads();
        value[t] = left + 1;
        __syncthreads();
    }
    out[blockIdx.x * n + t] = value[t];
}

/* no barrier; its source has one (ring_rounds) */
extern "C" __global__ void scaled(const unsigned char* bytes, u64* wide, unsigned int* narrow, float* out,
                                  float factor, unsigned long long offset, unsigned int n, long long* total) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    out[i] = bytes[i] * factor / 2.0f + 1.5f + fminf(out[i], 0.0f);
    wide[i] = offset + bytes[i];
    narrow[i] = __float_as_int(1.0f) + i;
    atomicMin(total, (long long)bytes[i] - 7);
}

extern "C" __global__ void early_return(float* out) {
    if (threadIdx.x == 3) return;
    __syncthreads();
    out[threadIdx.x] = 1.0f;
}
"""


@pytest.fixture(autouse=True)
def compiler():
    assert cuda_emulator.COMPILER is not None, "the CPU emulation of the kernels needs g++ or clang++"


def test_a_shared_memory_reduction_with_barriers_sums_each_block():
    values = np.arange(200, dtype=np.float32)
    sums = np.zeros(4, dtype=np.float32)
    kernel = cuda_emulator.EmulatedKernel(SOURCE, "block_sums")
    assert kernel.cooperative
    kernel((4,), (64,), (values, sums, np.int32(200)))
    assert sums.tolist() == [values[b * 64 : (b + 1) * 64].sum() for b in range(4)]


def test_rounds_of_neighbour_exchange_see_every_write_of_the_round_before():
    threads, rounds, blocks = 8, 50, 3
    out = np.zeros(blocks * threads, dtype=np.int32)
    kernel = cuda_emulator.EmulatedKernel(SOURCE, "ring_rounds")
    assert kernel.cooperative
    kernel((blocks,), (threads,), (out, np.int32(rounds)))
    for b in range(blocks):  # each block starts from its own values: no shared contents leak between blocks
        start = np.arange(threads) + 100 * b
        assert out[b * threads : (b + 1) * threads].tolist() == (np.roll(start, rounds) + rounds).tolist()


def test_a_kernel_without_barriers_runs_its_threads_in_turn_with_every_parameter_type():
    n = 300
    bytes_ = np.arange(n, dtype=np.uint8)  # wraps at 256
    wide, narrow = np.zeros(n, dtype=np.uint64), np.zeros(n, dtype=np.uint32)
    out, total = np.ones(n, dtype=np.float32), np.zeros(1, dtype=np.int64)
    kernel = cuda_emulator.EmulatedKernel(SOURCE, "scaled")
    assert not kernel.cooperative
    kernel((3,), (128,), (bytes_, wide, narrow, out, np.float32(3.0), np.uint64(2**63), np.uint32(n), total))
    assert out.tolist() == (bytes_ * np.float32(1.5) + np.float32(1.5)).tolist()
    assert wide.tolist() == [2**63 + int(b) for b in bytes_]
    assert narrow.tolist() == [0x3F800000 + i for i in range(n)]
    assert total.tolist() == [-7]


def test_a_barrier_some_threads_returned_from_is_an_error():
    out = np.zeros(8, dtype=np.float32)
    with pytest.raises(RuntimeError, match="__syncthreads"):
        cuda_emulator.EmulatedKernel(SOURCE, "early_return")((1,), (8,), (out,))


def test_a_launch_cuda_would_refuse_is_refused():
    out = np.zeros(8, dtype=np.int32)
    kernel = cuda_emulator.EmulatedKernel(SOURCE, "ring_rounds")
    with pytest.raises(AssertionError, match="threads per block"):
        kernel((1,), (2048,), (out, np.int32(1)))
    with pytest.raises(AssertionError):  # the scalar's type is the kernel's
        kernel((1,), (8,), (out, 1))


TOYS = r"""
extern "C" __global__ void halve(const float* in, float* out) { out[threadIdx.x] = in[threadIdx.x] * 0.5f; }

/* every thread writes the same cell: the last to run wins, so the result depends on the order */
extern "C" __global__ void last_writer(int* out) { out[0] = blockIdx.x * blockDim.x + threadIdx.x; }

/* writes one float per thread: past the end of `out` when there are more threads than cells */
extern "C" __global__ void one_each(float* out) { out[threadIdx.x] = 1.0f; }
"""


def test_float_denormals_are_flushed_to_zero_as_cupy_compiles_the_kernels():
    """CuPy compiles with -ftz=true (after utils/cuda.py's options; NVRTC takes the last --ftz), so a GPU
    flushes float denormals, in and out; the emulator does too, and leaves numpy's mode as it was."""
    tiny = np.finfo(np.float32).tiny  # the smallest normal: half of it is a denormal
    values = np.array([tiny, tiny / 4, 3.0, -tiny], dtype=np.float32)
    out = np.full(4, 7.0, dtype=np.float32)
    cuda_emulator.EmulatedKernel(TOYS, "halve")((1,), (4,), (values, out))
    assert out.tolist() == [0.0, 0.0, 1.5, 0.0]
    assert values[1] * np.float32(2) == tiny / 2 != 0  # numpy keeps denormals after the launch


def test_the_reversed_order_check_catches_a_kernel_whose_result_depends_on_the_order(monkeypatch):
    monkeypatch.setattr(cuda_emulator, "CHECK_ORDER", True)
    out = np.zeros(1, dtype=np.int32)
    with pytest.raises(RuntimeError, match="reverse order"):
        cuda_emulator.EmulatedKernel(TOYS, "last_writer")((2,), (8,), (out,))
    values, sums = np.arange(200, dtype=np.float32), np.zeros(4, dtype=np.float32)  # barriers: one result
    cuda_emulator.EmulatedKernel(SOURCE, "block_sums")((4,), (64,), (values, sums, np.int32(200)))
    assert sums.tolist() == [values[b * 64 : (b + 1) * 64].sum() for b in range(4)]


@pytest.mark.skipif(
    not cuda_emulator.ASAN_RUNTIME or not Path(cuda_emulator.ASAN_RUNTIME).is_file(),
    reason="the compiler has no AddressSanitizer runtime",
)
def test_the_sanitized_build_stops_at_an_out_of_bounds_write():
    script = (
        "import sys, numpy as np, cuda_emulator\n"
        f"kernel = cuda_emulator.EmulatedKernel({TOYS!r}, 'one_each')\n"
        "kernel((1,), (int(sys.argv[1]),), (np.zeros(8, dtype=np.float32),))\n"
    )
    env = {
        **os.environ,
        "LD_PRELOAD": cuda_emulator.ASAN_RUNTIME,
        "ASAN_OPTIONS": "detect_leaks=0",
        "RASTERKIT_EMULATOR_SANITIZE": "1",
        "PYTHONPATH": str(Path(__file__).parent),
    }
    fits = subprocess.run([sys.executable, "-c", script, "8"], env=env, capture_output=True, text=True)
    assert fits.returncode == 0, fits.stderr
    overflows = subprocess.run([sys.executable, "-c", script, "9"], env=env, capture_output=True, text=True)
    assert overflows.returncode != 0 and "heap-buffer-overflow" in overflows.stderr, overflows.stderr[-2000:]
