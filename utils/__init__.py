"""RasterKit's engine: plain functions on torch tensors, importable without ComfyUI (the node pack's
`utils/`, installed as the library `rasterkit`). Packages: core (device, batching, kernels' plumbing),
inputs (every parser), and the engines gpu_rendering (2D primitives, overlays, line plots), gpu_graph
(neighbours, triangulation, tracking), gpu_curves (Bezier flattening), color_optimizer (PrimitiveMesh)
and mesh_rasterizer (rasterize, cameras, maps, shading, baking, the stand-ins). docs/library.md."""
