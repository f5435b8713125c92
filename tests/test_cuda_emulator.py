"""The CPU emulation of CUDA kernels (tests/cuda_emulator.py) keeps CUDA's meaning of shared memory and
barriers, so that the kernel tests that rely on it test what a GPU does. Fails without a compiler."""
import numpy as np
import pytest

import cuda_emulator

SOURCE = r"""
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

/* each round every thread adds its left neighbour's value of the round before */
extern "C" __global__ void ring_rounds(float* out, int rounds) {
    __shared__ float value[32];
    int t = threadIdx.x, n = blockDim.x;
    value[t] = (float)(t + 100 * blockIdx.x);
    __syncthreads();
    for (int r = 0; r < rounds; ++r) {
        float left = value[(t + n - 1) % n];
        __syncthreads();
        value[t] += left;
        __syncthreads();
    }
    out[blockIdx.x * n + t] = value[t];
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
    cuda_emulator.EmulatedKernel(SOURCE, "block_sums")((4,), (64,), (values, sums, np.int32(200)))
    assert sums.tolist() == [values[b * 64:(b + 1) * 64].sum() for b in range(4)]


def test_rounds_of_neighbour_exchange_see_every_write_of_the_round_before():
    threads, rounds, blocks = 8, 50, 3
    out = np.zeros(blocks * threads, dtype=np.float32)
    cuda_emulator.EmulatedKernel(SOURCE, "ring_rounds")((blocks,), (threads,), (out, np.int32(rounds)))
    for b in range(blocks):  # a block starts from its own values: no shared contents leak between blocks
        value = np.arange(threads, dtype=np.float64) + 100 * b
        for _ in range(rounds):
            value = value + np.roll(value, 1)
        assert np.allclose(out[b * threads:(b + 1) * threads], value, rtol=1e-6)


def test_a_barrier_some_threads_returned_from_is_an_error():
    out = np.zeros(8, dtype=np.float32)
    with pytest.raises(RuntimeError, match="__syncthreads"):
        cuda_emulator.EmulatedKernel(SOURCE, "early_return")((1,), (8,), (out,))
