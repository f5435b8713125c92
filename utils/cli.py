"""The `rasterkit` command: `rasterkit plots SERIES --out DIR` draws a line-plot dataset (utils/datasets.py)."""

from __future__ import annotations

import argparse
import sys

from .datasets import FORMATS, Job, Plot, run, run_dask, source_for
from .inputs.colors import parse_hex


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rasterkit", description="RasterKit from the command line.")
    commands = parser.add_subparsers(dest="command", required=True)
    plots = commands.add_parser(
        "plots",
        help="draw one line plot per series into a sharded dataset",
        description="Draw one line plot per series of SERIES (.npy [N,L], .parquet or .csv) into DIR: uint8 NPY "
        "shards, WebDataset tars of PNG or folders of PNG, with index.csv/index.json (row, shard, "
        "offset, label, sha256). Row i goes to shard i // --shard-size; rerunning skips the shards "
        "already written and verified.",
    )
    plots.add_argument("series", help="input: .npy (2-D, one series per row), .parquet or .csv")
    plots.add_argument("--out", required=True, help="output folder")
    plots.add_argument(
        "--format",
        choices=FORMATS,
        default="npy",
        help="npy: uint8 [n,H,W(,3)] shards; wds: WebDataset tars of PNG; png: folders of PNG",
    )
    plots.add_argument(
        "--column",
        help="Parquet: a list column (one series per row); with --window: the column "
        "to slide over (Parquet or CSV with a header)",
    )
    plots.add_argument("--label-column", help="column carried along as each image's label")
    plots.add_argument("--labels", help="NPY input: a 1-D .npy of labels, one per row")
    plots.add_argument("--window", type=int, help="sliding windows of this many values over --column")
    plots.add_argument("--stride", type=int, default=1, help="rows between windows (default 1)")
    plots.add_argument(
        "--length", type=int, help="values per series (default: the first row's); rows of another length are malformed"
    )
    plots.add_argument("--width", type=int, default=224)
    plots.add_argument("--height", type=int, default=224)
    plots.add_argument(
        "--mode",
        choices=("aliased", "antialiased"),
        default="aliased",
        help="aliased: 1-px Bresenham lines; antialiased: --line-width px, round joins",
    )
    plots.add_argument("--line-width", type=float, default=1.0)
    plots.add_argument("--channels", type=int, choices=(1, 3), default=1, help="1: grey coverage; 3: RGB")
    plots.add_argument("--color", default="#FFFFFF", help="line colour #RRGGBB[AA] (default white)")
    plots.add_argument("--background", default="#000000", help="background #RRGGBB, --channels 3 (default black)")
    plots.add_argument("--shard-size", type=int, default=1000, help="images a shard (default 1000)")
    plots.add_argument("--batch-size", type=int, default=4096, help="images drawn at once (default 4096)")
    plots.add_argument("--device", help="torch device (default: CUDA, MPS, else CPU; or $RASTERKIT_DEVICE)")
    plots.add_argument(
        "--processes",
        type=int,
        default=1,
        help="worker processes writing shards (default 1, which uses every core; more for many cores)",
    )
    plots.add_argument(
        "--on-error",
        choices=("skip", "stop"),
        default="skip",
        help="a malformed row: skip it (listed in index.json) or stop with an error naming it",
    )
    plots.add_argument(
        "--dask",
        metavar="ADDRESS",
        help="run on Dask: 'auto' (a local cluster: a worker a GPU, else a core) or a scheduler's address "
        "(tcp://host:8786)",
    )
    plots.add_argument(
        "--dask-workers", type=int, help="--dask auto: worker processes (default a GPU, else a core, each)"
    )
    plots.add_argument("--dask-threads", type=int, default=1, help="--dask auto: threads a worker (default 1)")
    plots.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        source = source_for(
            args.series,
            column=args.column,
            label_column=args.label_column,
            labels=args.labels,
            window=args.window,
            stride=args.stride,
            length=args.length,
        )
        plot = Plot(
            width=args.width,
            height=args.height,
            mode=args.mode,
            line_width=args.line_width,
            channels=args.channels,
            color=parse_hex(args.color, "--color"),
            background=parse_hex(args.background, "--background")[:3],
        )
        job = Job(
            source,
            args.out,
            format=args.format,
            plot=plot,
            shard_size=args.shard_size,
            batch_size=args.batch_size,
            on_error=args.on_error,
            device=args.device,
        )
        if args.dask:
            index = run_dask(
                job, args.dask, workers=args.dask_workers, threads=args.dask_threads, progress=not args.no_progress
            )
        else:
            index = run(job, progress=not args.no_progress, processes=args.processes)
    except (ValueError, OSError) as error:
        print(f"rasterkit plots: error: {error}", file=sys.stderr)
        return 2
    skipped = f", {len(index['errors'])} malformed rows skipped (see index.json)" if index["errors"] else ""
    shards = len(index["shards"])
    print(f"{index['images']} images in {shards} shard{'s' * (shards != 1)} in {args.out}{skipped}")
    return 0
