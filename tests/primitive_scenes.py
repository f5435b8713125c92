"""Generated pictures for PrimitiveMesh's tests (tests/color_optimizer, tests/nodes/test_primitive_node.py),
and the render's coverage of shapes alone."""

import torch

from rasterkit.utils import color_optimizer as co


def scene(height=40, width=56, seed=0):
    """A smooth generated picture with a few blobs, float [1,H,W,3]."""
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(height, dtype=torch.float32)[:, None]
    x = torch.arange(width, dtype=torch.float32)[None, :]
    image = torch.stack([0.3 + 0.4 * x / width + 0 * y, 0.2 + 0.5 * y / height + 0 * x, 0.5 + 0 * x + 0 * y], -1)
    for _ in range(4):
        cx, cy, r = torch.rand(3, generator=g) * torch.tensor([width, height, 12.0]) + torch.tensor([0, 0, 4.0])
        colour = torch.rand(3, generator=g)
        blob = (((x - cx) ** 2 + (y - cy) ** 2) < r**2).float()[..., None]
        image = image * (1 - blob) + colour * blob
    return image[None]


def transparent(image, seed=0):
    """image [1,H,W,3] as premultiplied RGBA with a generated alpha (clear, opaque and between), [1,H,W,4]."""
    height, width = image.shape[1:3]
    y = torch.arange(height, dtype=torch.float32)[:, None]
    x = torch.arange(width, dtype=torch.float32)[None, :]
    alpha = ((x / width + 0.3 * torch.sin(y / 5 + seed)) * 1.6 - 0.4).clamp(0, 1)[None, ..., None]
    return torch.cat([image * alpha, alpha], -1)


def coverage(kind, params, height, width):
    """The render's anti-aliased coverage [K,H,W] of K shapes (kind [K], params [K,8]): each alone,
    opaque and white on black (source-over then gives its coverage exactly)."""
    count = kind.shape[0]
    shapes = co.Approximation(
        kind=kind[:, None],
        params=params[:, None],
        color=torch.ones(count, 1, 3),
        alpha=torch.ones(count, 1),
        count=torch.ones(count, dtype=torch.long),
        error=torch.zeros(count, 2),
        background=torch.zeros(count, 3),
        height=height,
        width=width,
    )
    return co.render(shapes, height, width, 1.0)[0][..., 0]
