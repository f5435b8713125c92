"""One module per node family; NODE_CLASSES lists every node the pack registers."""

from . import bake, boxes, editors, links, masks, mesh, primitives, series, tracks

NODE_CLASSES = [
    *bake.NODES,
    *boxes.NODES,
    *editors.NODES,
    *links.NODES,
    *masks.NODES,
    *mesh.NODES,
    *primitives.NODES,
    *series.NODES,
    *tracks.NODES,
]
