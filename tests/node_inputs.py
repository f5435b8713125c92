"""Tiny inputs for every node (tests/nodes/test_contract.py, tests/test_bad_input.py): each widget at its
default, each socket a small sample of its type, and what a node needs to have work to do."""

import torch

WIDGETS = {"INT", "FLOAT", "STRING", "BOOLEAN"}

SAMPLES = {
    "IMAGE": lambda: torch.rand(2, 24, 32, 3),
    "MASK": lambda: torch.zeros(2, 24, 32),
}


def tiny_mesh(uvs=False):
    from rasterkit.nodes.mesh import Mesh

    return Mesh(
        torch.tensor([[[-1.0, -1, 0], [1, -1, 0], [0, 1, 0]]]),
        torch.tensor([[[0, 1, 2]]]),
        uvs=torch.tensor([[[0.0, 0], [1, 0], [0.5, 1]]]) if uvs else None,
    )


def tiny_raster():
    """The raster of two 24x32 views of tiny_mesh (the IMAGE sample's batch and size)."""
    from rasterkit.nodes.mesh import MeshRasterizer

    return MeshRasterizer.run(mesh=tiny_mesh(), width=32, height=24, views="list", view_list="0,0; 30,10")[5]


# inputs without which a node has nothing to work on (their defaults are empty on purpose)
NEEDED = {
    "RasterKit_LoadMesh": lambda: {"mesh_file": "rasterkit_torus.obj"},
    "RasterKit_MeshRasterizer": lambda: {"mesh": tiny_mesh(), "width": 16, "height": 16},
    "RasterKit_UVMaps": lambda: {"mesh": tiny_mesh(uvs=True), "texture_size": 8},
    "RasterKit_BakeTexture": lambda: {"mesh": tiny_mesh(uvs=True), "texture_size": 8, "raster": tiny_raster()},
    "RasterKit_TrackTrails": lambda: {
        "tracks": {"track_path": torch.rand(2, 3, 2) * 20, "track_visibility": torch.ones(2, 3, dtype=torch.bool)}
    },
    "RasterKit_PrimitiveMesh": lambda: {
        "shapes": 5,
        "candidates": 50,
        "mutations": 10,
        "working_size": 32,
        "output_size": 64,
    },  # defaults take minutes
}


def tiny_inputs(node):
    inputs = NEEDED[node.NODE_ID]() if node.NODE_ID in NEEDED else {}
    for spec in node.INPUTS:
        if spec.optional or spec.name in inputs:
            continue
        if spec.type in WIDGETS or spec.type == "COMBO":
            inputs[spec.name] = spec.default
        else:
            assert spec.type in SAMPLES, f"{node.NODE_ID}: add a sample {spec.type} for input {spec.name}"
            inputs[spec.name] = SAMPLES[spec.type]()
    return inputs
