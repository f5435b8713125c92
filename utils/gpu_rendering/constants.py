"""The 2D renderer's constants, read by its torch path (compositor.py, primitives.py), numba's loop
(compositor_cpu.py) and the CUDA kernel (compositor_cuda.py, whose #defines are every integer constant
of this module): primitive kinds, the parameter columns of each kind, tile and reach constants, and
the classes of (tile, primitive) pairs."""

from __future__ import annotations

TILE = 8  # measured on the CPU: 8x8 beats 16x16 (less waste along edges) and 4x4 (overhead)

# primitive kinds
SEGMENT, BOX_FILL, BOX_STROKE, DISC, SPRITE, ELLIPSE, HALO, TRIANGLE = range(8)
N_KINDS = 8

# The parameter columns of each kind (Primitives.params float32 [P, N_PARAMS]; columns not named hold 0):
# the one table that the torch path, numba's loop and the CUDA kernel read. Every kind's anchor (a
# segment's first end, a centre, a sprite's corner) is columns ANCHOR_X, ANCHOR_Y; the turned kinds
# (boxes, ellipses, halos) keep cos and sin of their angle in the same columns (BOX_SIN == ELLIPSE_SIN ==
# HALO_SIN: sin != 0 is "turned" for all); segments and discs repeat their variant there (butt caps, rings),
# so that binning reads every kind's variant from one column.
N_PARAMS = 10
ANCHOR_X, ANCHOR_Y = 0, 1
SEGMENT_AX, SEGMENT_AY, SEGMENT_BX, SEGMENT_BY, SEGMENT_HALF_WIDTH, SEGMENT_BUTT = range(6)  # BUTT: 1 butt caps
SEGMENT_BUTT_FLAG = 9  # BUTT again, in the column of the turned kinds' sin: binning's one flag column
BOX_CX, BOX_CY, BOX_HALF_X, BOX_HALF_Y, BOX_RADIUS, BOX_HALF_STROKE, BOX_CORNER_LENGTH = range(7)  # both box kinds
BOX_COS, BOX_SIN = 8, 9
DISC_CX, DISC_CY, DISC_RADIUS, DISC_RING_HALF = range(4)  # RING_HALF: 0 a filled disc
DISC_RING_FLAG = 9  # RING_HALF again, in the column of the turned kinds' sin: binning's one flag column
ELLIPSE_CX, ELLIPSE_CY, ELLIPSE_RADIUS_X, ELLIPSE_RADIUS_Y, ELLIPSE_RING_HALF = range(5)  # RING_HALF: 0 a fill
ELLIPSE_COS, ELLIPSE_SIN = 8, 9
SPRITE_X0, SPRITE_Y0, SPRITE_WIDTH, SPRITE_HEIGHT, SPRITE_ATLAS_X, SPRITE_ATLAS_Y = range(6)
# a halo: the box it surrounds (as BOX_ columns) and its width, over which its opacity falls smoothly to 0
HALO_CX, HALO_CY, HALO_HALF_X, HALO_HALF_Y, HALO_RADIUS, HALO_WIDTH = range(6)
HALO_COS, HALO_SIN = 8, 9
# a filled triangle: its corners a, b, c, clockwise on screen (x right, y down: (b - a) x (c - a) > 0)
TRIANGLE_AX, TRIANGLE_AY, TRIANGLE_BX, TRIANGLE_BY, TRIANGLE_CX, TRIANGLE_CY = range(6)

ELLIPSE_STEPS = 4  # closest-point iterations: within 0.02 px of the true distance up to 15:1 axes

# Classes of (tile, primitive) pairs, in the order in which the torch path evaluates them. Box pairs form
# one run (fills, strokes, strokes near a rounded corner, fills near one), so that one evaluation shares
# its work among them: the strokes are contiguous, and so are the tiles near corners. Turned boxes (sin
# != 0) are not separable: their fills and strokes form a run of their own. PAIR_SOLID: the primitive
# covers the whole tile; PAIR_MISSED: its bounds reach the tile but its shape does not.
(
    PAIR_SEGMENT,
    PAIR_BOX_FILL,
    PAIR_BOX_STROKE,
    PAIR_BOX_STROKE_CORNER,
    PAIR_BOX_FILL_CORNER,
    PAIR_TURNED_FILL,
    PAIR_TURNED_STROKE,
    PAIR_DISC,
    PAIR_ELLIPSE,
    PAIR_HALO,
    PAIR_SPRITE,
    PAIR_TRIANGLE,
    PAIR_SOLID,
    PAIR_MISSED,
) = range(14)
N_PAIR_CLASSES = 14
