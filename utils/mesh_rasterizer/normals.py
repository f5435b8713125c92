"""Normals of a mesh at its face corners, for the normal maps and shading of the Mesh Rasterizer and the
UV maps: smooth across vertices split at UV seams (welded by position), hard across edges sharper than
an angle, flat, or the file's. Batched torch ops (index_add / scatter_reduce over corners), no loop
over faces or vertices.

Corner normals are float [F,3,3]: face, corner, xyz. Each face contributes its unit normal weighted by
its angle at the corner (Thuermer and Wuethrich's weights: a vertex's normal does not depend on how the
faces around it are triangulated).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..inputs.mesh import NORMAL_SMOOTHINGS
from ..inputs.text import short
from .shading import edge_partners, weld

DEFAULT_ANGLE = 60.0  # degrees: edges sharper than this stay hard under "by_position"
COPLANAR = 1e-6  # cosine margin, so that coplanar faces (a quad's halves) join even at angle 0


def corner_normals(
    vertices: torch.Tensor,
    faces: torch.Tensor,
    smoothing: str = "auto",
    angle: float = DEFAULT_ANGLE,
    normals: torch.Tensor | None = None,
) -> torch.Tensor:
    """Unit normals float [F,3,3] at the corners of faces int [F,3] of vertices float [V,3]:

    - by_position: vertices welded by exact position (so UV seams do not show), each corner averaging
      the faces around its position that reach it across edges of at most `angle` degrees between
      face normals (a smoothing group per fan: a cube keeps its edges, a sphere split at seams does not);
    - by_vertex: each vertex index averages the faces that use it (the mesh's own splits are its hard
      edges); flat: each face's own normal; from_file: normals float [V,3], the mesh's;
    - auto: from_file where normals are given, else by_position.
    """
    if smoothing not in NORMAL_SMOOTHINGS:
        raise ValueError(f"normal_smoothing: expected one of {', '.join(NORMAL_SMOOTHINGS)}, got {short(smoothing)}")
    if smoothing == "auto":
        smoothing = "by_position" if normals is None else "from_file"
    faces = faces.long()
    if smoothing == "from_file":
        if normals is None:
            raise ValueError(
                "normal_smoothing: from_file needs a mesh with normals (a file that stores them, or a MESH "
                "with .normals); auto, by_position, by_vertex or flat compute them"
            )
        return F.normalize(normals[faces], dim=-1)
    if isinstance(angle, bool) or not isinstance(angle, (int, float)) or not 0 <= angle <= 180:
        raise ValueError(f"smoothing_angle: expected degrees from 0 to 180, got {short(angle)}")
    unit, weight = _face_terms(vertices, faces)
    if smoothing == "flat":
        return unit[:, None].expand(-1, 3, -1).contiguous()
    contribution = (weight[..., None] * unit[:, None]).reshape(-1, 3)  # [3F,3]
    if smoothing == "by_vertex":
        summed = torch.zeros_like(vertices).index_add_(0, faces.reshape(-1), contribution)
        return F.normalize(summed[faces], dim=-1)
    welded = weld(vertices)[faces]  # [F,3]
    group = _smoothing_groups(unit, welded, edge_partners(faces, vertices, welded), math.cos(math.radians(angle)))
    summed = torch.zeros_like(contribution).index_add_(0, group, contribution)[group]
    # a degenerate face joins no group (its normal is 0): it takes its position's whole fan
    fan = torch.zeros_like(vertices).index_add_(0, welded.reshape(-1), contribution)[welded.reshape(-1)]
    summed = torch.where(summed.norm(dim=-1, keepdim=True) > 1e-6, summed, fan)
    return F.normalize(summed, dim=-1).view(-1, 3, 3)


def _face_terms(vertices: torch.Tensor, faces: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Unit face normals float [F,3] (0 for degenerate faces) and each corner's angle float [F,3]."""
    corners = vertices[faces]  # [F,3,3]
    unit = F.normalize(torch.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0], dim=-1), dim=-1)
    ahead, behind = corners.roll(-1, 1) - corners, corners.roll(1, 1) - corners
    # atan2 of |a x b| and a . b: accurate at small and obtuse angles alike, 0 at a zero-length edge
    angle = torch.atan2(torch.cross(ahead, behind, dim=-1).norm(dim=-1), (ahead * behind).sum(-1))
    return unit, angle


def _smoothing_groups(unit: torch.Tensor, welded: torch.Tensor, partners: torch.Tensor, cosine: float) -> torch.Tensor:
    """A group id int64 [3F] per corner: corners of one welded position joined through faces that share
    an edge whose face normals (unit float [F,3]) meet at cosine >= `cosine`; welded int64 [F,3],
    partners int64 [F,3] (edge i, opposite corner i; -1 open). Connected components by hooking and
    pointer jumping: a few passes (a fan around a vertex is short), each with one host sync."""
    count = len(welded)
    face = torch.arange(count, device=welded.device)[:, None]
    across = partners.clamp_min(0)
    solid = unit.abs().sum(-1) > 0  # degenerate faces join nothing: they would bridge hard edges
    smooth = (partners >= 0) & ((unit[:, None] * unit[across]).sum(-1) >= cosine - COPLANAR)  # [F,3]
    smooth &= solid[:, None] & solid[across]
    # each edge once: from its lower face, or from both where the partner does not pair back (non-manifold)
    smooth &= (face < across) | ~(partners[across] == face[..., None]).any(-1)
    beyond = welded.int()[across]  # [F,3 edges,3 corners of the partner]
    corner = torch.arange(3 * count, device=welded.device).view(-1, 3)
    ends = []
    for shift in (1, 2):  # the corners on edge i: i + 1 and i + 2 (roll(-shift) puts them at i)
        same = beyond == welded.int().roll(-shift, 1)[..., None]
        # the partner's corner at the same position; edges that do not join link a corner to itself
        ends.append(torch.where(smooth & same.any(-1), across * 3 + same.int().argmax(-1), corner.roll(-shift, 1)))
    parent = corner.reshape(-1)
    while True:
        hooked = parent.clone()
        for shift, end in zip((1, 2), ends, strict=True):
            mine, theirs = hooked.view(-1, 3).roll(-shift, 1), hooked[end]
            low = torch.minimum(mine, theirs).view(-1)
            # both corners of each link, then both their roots, take the lower label (in place: memory)
            for index in (corner.roll(-shift, 1), end, mine, theirs):
                hooked.scatter_reduce_(0, index.reshape(-1), low, "amin")
        hooked = hooked[hooked]
        if torch.equal(hooked, parent):
            return parent
        parent = hooked


def interpolate_corners(normals: torch.Tensor, findices: torch.Tensor, barycentric: torch.Tensor) -> torch.Tensor:
    """Per-pixel values float [..,H,W,C] of values at face corners normals float [M,3,C], at findices int
    [..,H,W] (face + 1; 0 is background, which gets 0) and barycentric float [..,H,W,3]."""
    face = (findices.long() - 1).clamp_min(0)
    return (barycentric[..., None] * normals[face]).sum(-2) * (findices > 0)[..., None]
