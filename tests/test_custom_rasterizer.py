"""utils/custom_rasterizer.py: Hunyuan3D-2's custom_rasterizer API, as its MeshRender calls it."""
import torch

from rasterkit.utils import custom_rasterizer as cr
from rasterkit.utils import mesh_rasterizer as M


def quad():
    pos = torch.tensor([[[-0.9, -0.8, 0.1, 1.0], [0.8, -0.9, 0.2, 1.0], [0.7, 0.9, 0.3, 1.0], [-0.8, 0.8, 0.4, 1.0]]])
    return pos, torch.tensor([[0, 1, 2], [0, 2, 3]], dtype=torch.int32)


def test_rasterize_and_interpolate_have_hunyuans_signatures_and_shapes():
    pos, tri = quad()
    findices, barycentric = cr.rasterize(pos, tri, resolution=(24, 32), clamp_depth=torch.zeros(0), use_depth_prior=0)
    assert findices.shape == (24, 32) and findices.dtype == torch.int32
    assert barycentric.shape == (24, 32, 3) and barycentric.dtype == torch.float32
    expected = M.rasterize(pos[0], tri, 32, 24)
    assert torch.equal(findices, expected[0]) and torch.equal(barycentric, expected[1])
    colours = torch.rand(1, 4, 3)
    image = cr.interpolate(colours, findices, barycentric, tri)
    assert image.shape == (1, 24, 32, 3)
    assert torch.allclose(image[0], M.interpolate(colours[0], findices, barycentric, tri))


def test_depth_prior_is_used_only_when_asked():
    pos, tri = quad()
    prior = torch.full((24, 32), 1.0)  # everything is nearer than the far plane
    hidden, _ = cr.rasterize(pos, tri, (24, 32), clamp_depth=prior, use_depth_prior=1)
    shown, _ = cr.rasterize(pos, tri, (24, 32), clamp_depth=prior, use_depth_prior=0)
    assert int((hidden > 0).sum()) == 0 and int((shown > 0).sum()) > 0


def test_the_pack_serves_import_custom_rasterizer():
    import custom_rasterizer

    assert custom_rasterizer.rasterize is cr.rasterize and custom_rasterizer.interpolate is cr.interpolate
