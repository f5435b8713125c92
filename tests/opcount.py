"""(A copy of ../shared/tools/opcount.py, so that CI checks the op, sync and upload budgets of the GPU
issues without ../shared.)

Count what a call would cost on a GPU, measured on the CPU: device ops (~kernel launches), host
syncs (ops that make the host wait for the device on CUDA, and host reads: .item(), .tolist(),
.numpy()), uploads (tensors made from host data: torch.tensor / as_tensor / new_tensor of Python
values; on CUDA each is a pageable copy that waits for the stream) and float64 ops (absent on MPS,
1/64 rate on consumer NVIDIA cards). A GPU-free proxy for launch- and transfer-bound designs.

    with OpCount() as c: f()
    c.launches, c.syncs, c.uploads, c.float64, c.top(10), c.summary()

Indexing a device tensor with a Python list is an upload too, and is not counted: read your code.
"""

from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# ops that only make views or metadata: no kernel
VIEWS = {
    "view",
    "_unsafe_view",
    "expand",
    "slice",
    "select",
    "unsqueeze",
    "squeeze",
    "as_strided",
    "t",
    "permute",
    "transpose",
    "alias",
    "detach",
    "unbind",
    "split",
    "split_with_sizes",
    "chunk",
    "narrow",
    "diagonal",
    "view_as_real",
    "view_as_complex",
    "lift_fresh",
    "_reshape_alias",
    "unfold",
    "movedim",
    "numpy_T",
    "empty",
    "empty_strided",
    "empty_like",
    "new_empty",
    "new_empty_strided",
    "sym_size",
    "sym_stride",
    "sym_numel",
    "sym_storage_offset",
    "is_same_size",
    "_has_compatible_shallow_copy_type",
    "resolve_conj",
    "resolve_neg",
    "set_",
    "result_type",
}
# host data becoming a tensor: on CUDA a blocking host-to-device copy when it is made on, or moved to, the GPU
UPLOADS = {"lift_fresh"}
# Tensor methods that read device memory on the host without dispatching an op on the CPU
HOST_READS = ("tolist", "numpy", "item")
# ops that force the host to wait for the device (data-dependent output sizes or host reads)
SYNCS = {
    "_local_scalar_dense",
    "nonzero",
    "nonzero_static",
    "masked_select",
    "_unique",
    "_unique2",
    "unique_dim",
    "unique_consecutive",
    "unique_dim_consecutive",
    "equal",
    "is_nonzero",
    "allclose",
    "masked_scatter",
    "_assert_async",
    "bincount",
    "histc",
    "nonzero_numpy",
    "argwhere",
    "where.default",
}


class OpCount(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = Counter()
        self.sync_ops = Counter()
        self.f64_ops = Counter()
        self.upload_ops = Counter()

    def __enter__(self):
        self._host_reads = {name: getattr(torch.Tensor, name) for name in HOST_READS}
        for name, method in self._host_reads.items():
            setattr(torch.Tensor, name, self._counted(name, method))
        return super().__enter__()

    def __exit__(self, *exc):
        for name, method in self._host_reads.items():
            setattr(torch.Tensor, name, method)
        return super().__exit__(*exc)

    def _counted(self, name, method):
        def read(tensor, *args, **kwargs):
            self.sync_ops[name] += 1
            return method(tensor, *args, **kwargs)

        return read

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        out = func(*args, **kwargs)
        if name in UPLOADS:
            self.upload_ops[name] += 1
            return out
        if name in VIEWS:
            return out
        self.ops[name] += 1
        if name in SYNCS or func.__name__ in SYNCS:
            self.sync_ops[name] += 1
        elif (
            name == "repeat_interleave"
            and kwargs.get("output_size") is None
            and (len(args) > 1 and isinstance(args[1], torch.Tensor) or len(args) == 1)
        ):
            self.sync_ops[name] += 1
        elif name in ("index", "index_put", "index_put_") and any(
            isinstance(i, torch.Tensor) and i.dtype == torch.bool
            for i in (args[1] if len(args) > 1 else [])
            if i is not None
        ):
            self.sync_ops[name + "[bool]"] += 1
        tensors = [a for a in list(args) + list(kwargs.values()) if isinstance(a, torch.Tensor)]
        outs = out if isinstance(out, (tuple, list)) else [out]
        tensors += [o for o in outs if isinstance(o, torch.Tensor)]
        if any(t.dtype in (torch.float64, torch.complex128) for t in tensors):
            self.f64_ops[name] += 1
        return out

    @property
    def launches(self):
        return sum(self.ops.values())

    @property
    def syncs(self):
        return sum(self.sync_ops.values())

    @property
    def uploads(self):
        return sum(self.upload_ops.values())

    @property
    def float64(self):
        return sum(self.f64_ops.values())

    def top(self, n=10):
        return self.ops.most_common(n)

    def summary(self):
        return (
            f"{self.launches} device ops, {self.syncs} host syncs ({dict(self.sync_ops.most_common(6))}), "
            f"{self.uploads} uploads, {self.float64} float64 ops"
        )
