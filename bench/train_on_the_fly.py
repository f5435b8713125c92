"""Training on line plots drawn on the fly, no dataset on disk: a DataLoader whose batches are series, drawn
by render_polylines in collate_fn (one call a batch, in the loader's worker processes), or drawn on the
GPU in the training step when there is one. Prints images/s of the loader alone and of training a small
CNN with it (docs/library.md, "Training on the fly").
    .venv/bin/python bench/train_on_the_fly.py [--batches 50] [--batch-size 256] [--workers 2]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

import _common  # noqa: F401  (puts the repository root on sys.path; installed: from rasterkit.gpu_rendering ...)
from utils.gpu_rendering import render_polylines

SIZE = 224


class Series(Dataset):
    """Item i: (series float32 [L], label int). Here random walks labelled by whether they end up."""

    def __init__(self, count: int, steps: int = 100):
        walks = np.cumsum(np.random.default_rng(0).standard_normal((count, steps), np.float32), 1)
        self.values, self.labels = torch.from_numpy(walks), torch.from_numpy((walks[:, -1] > 0).astype(np.int64))

    def __len__(self):
        return len(self.values)

    def __getitem__(self, i):
        return self.values[i], self.labels[i]


def draw_batch(items):
    """collate_fn: the batch's series [B,L] drawn at once: uint8 images [B,1,H,W] (a quarter of float32's
    bytes to pass from the worker process), labels [B]."""
    values = torch.stack([v for v, _ in items])
    labels = torch.stack([y for _, y in items])
    return render_polylines(values, SIZE, SIZE, dtype=torch.uint8)[:, None], labels


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=50)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dataset = Series(args.batches * args.batch_size)
    on_gpu = device.type == "cuda"
    # on a GPU the loader hands series and the training step draws them there; on the CPU its workers draw
    loader = DataLoader(
        dataset,
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=args.workers,
        collate_fn=None if on_gpu else draw_batch,
        persistent_workers=args.workers > 0,
    )
    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 8, 5, stride=4),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(4),
        torch.nn.Flatten(),
        torch.nn.Linear(128, 2),
    ).to(device)
    optimiser = torch.optim.SGD(model.parameters(), lr=0.01)

    def images(batch):
        if on_gpu:
            values, labels = batch
            return render_polylines(values.to(device, non_blocking=True), SIZE, SIZE)[:, None], labels.to(device)
        return batch[0].to(device).float().div_(255), batch[1].to(device)

    for _ in loader:  # warm-up: the workers start and compile numba's loops once
        pass
    for train in (False, True):
        start = time.perf_counter()
        for batch in loader:
            x, y = images(batch)
            if train:
                loss = torch.nn.functional.cross_entropy(model(x), y)
                optimiser.zero_grad()
                loss.backward()
                optimiser.step()
        if on_gpu:
            torch.cuda.synchronize()
        rate = len(dataset) / (time.perf_counter() - start)
        what = "training step (draw + small CNN)" if train else "loader alone (draw)"
        print(
            f"{what}: {rate:,.0f} images/s, {len(dataset):,} images of {SIZE}x{SIZE} on {device}, "
            f"{args.workers} workers"
        )


if __name__ == "__main__":
    main()
