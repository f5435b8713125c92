"""The mesh rasterizer's constants, shared by its torch path (raster.py), its CUDA kernels (raster_cuda.py,
whose `#define`s are generated from these) and its numba loops (raster_cpu.py)."""

ID_BASE = 1 << 31  # z-buffer keys: quantised depth (saturated at 2^31) * ID_BASE + view * M + face
EMPTY = (1 << 63) - ID_BASE  # the z-buffer's value where no fragment landed: above every key, triangle part 0
DEPTH_STEPS = 1 << 18
FIXED = 1 << 52  # alpha = 1 - beta - gamma in this fixed point: exact in int64, one rounding to float32
TILE_ROWS = TILE_COLUMNS = 4  # the torch path's tile of candidate pixels (square: _triangles counts tiles so)
TILE_CANDIDATES = 1 << 23  # candidates per torch pass: about 40 bytes each in the temporaries
CUDA_BLOCK = 8  # the depth-test kernel's block: pixels per side that one thread tests
# the most threads of one launch: the depth test's threads test up to CUDA_BLOCK^2 pixels each (at most
# 6.7e7 tests and atomics, a few ms on a mid-range GPU), the resolve's one pixel each (a 4096^2 view)
LAUNCH_BLOCKS = 1 << 20
LAUNCH_PIXELS = 1 << 24
