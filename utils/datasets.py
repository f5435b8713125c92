"""Line-plot datasets: series read from NPY, Parquet or CSV, drawn in batches by render_polylines, written
as sharded uint8 NPY, WebDataset tars of PNG, or folders of PNG; deterministic and resumable.

Row i goes to shard i // shard_size, whatever the device, the batch size or the number of workers. A
shard is written under a temporary name and renamed when complete, then its sidecar `NAME.json`
(rows, labels, per-image sha256, the shard's sha256, errors) the same way. A rerun skips every shard
whose sidecar belongs to the same job and whose bytes still hash to the sidecar's sha256; the index
(index.csv, index.json) is rebuilt from the sidecars at the end. The same shard function runs in one
process (`run`) or on a Dask cluster (`run_dask`), so both write the same bytes.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import hashlib
import json
import logging
import math
import os
import shutil
import struct
import sys
import tarfile
import threading
import zlib
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor, as_completed
from pathlib import Path

import numpy as np
import torch

from .core.device import torch_device
from .gpu_rendering import render_polylines, render_polylines_packed

FORMATS = ("npy", "wds", "png")
ON_ERROR = ("skip", "stop")
_ENCODE_BATCH = 250  # PNGs an encoding task


@dataclasses.dataclass(frozen=True)
class Plot:
    """How each series is drawn: render_polylines' options (channels 1: the line's coverage, 0..255)."""

    width: int = 224
    height: int = 224
    mode: str = "aliased"
    line_width: float = 1.0
    channels: int = 1
    color: tuple = (1.0, 1.0, 1.0, 1.0)
    background: tuple = (0.0, 0.0, 0.0)


@dataclasses.dataclass(frozen=True)
class Source:
    """Where the series come from. kind "npy": a 2-D array [N,L], one series per row (labels: an
    optional 1-D .npy of N). "parquet"/"csv": one series per row (the numeric columns, or the list
    column `column`), or with `window` sliding windows of `window` values every `stride` rows over the
    column `column` (labelled with `label_column` at the window's last row)."""

    path: str
    kind: str
    column: str | None = None
    label_column: str | None = None
    labels: str | None = None
    window: int | None = None
    stride: int = 1
    length: int | None = None

    def open(self) -> _Table:
        opener = {"npy": _NpyTable, "parquet": _ParquetTable, "csv": _CsvTable}.get(self.kind)
        if opener is None:
            raise ValueError(f"series: unknown format {self.kind!r} of {self.path}; expected .npy, .parquet or .csv")
        if not Path(self.path).is_file():
            raise ValueError(f"series: no file {self.path}")
        if self.window is not None and (self.window < 2 or self.stride < 1 or self.column is None):
            raise ValueError(
                f"--window {self.window} --stride {self.stride}: expected a window of at least 2 values, "
                f"a stride of at least 1 and a --column to slide over"
            )
        return opener(self)


def source_for(path: str, **options) -> Source:
    """A Source whose kind is told by the file's extension (.npy, .parquet/.pq, .csv/.txt)."""
    suffix = Path(path).suffix.lower()
    kind = {".npy": "npy", ".parquet": "parquet", ".pq": "parquet", ".csv": "csv", ".txt": "csv"}.get(suffix, suffix)
    return Source(str(path), kind, **options)


class _Table:
    """A source opened: `count` series of `length` values; read(start, stop) gives float32 [n,L],
    their labels (list, None where absent) and {row: message} for the malformed rows among them."""

    count: int
    length: int

    def __init__(self, source: Source):
        self.source = source

    def read(self, start: int, stop: int):
        values, labels, errors = self._read(start, stop)
        finite = np.isfinite(values).any(axis=1) if values.shape[1] else np.zeros(len(values), bool)
        for i in np.flatnonzero(~finite):
            errors.setdefault(start + int(i), f"{self.where(start + int(i))}: no finite value (all NaN or empty)")
        return values, labels, errors

    def where(self, row: int) -> str:
        return f"row {row} of {self.source.path}"

    def _windows(self, column: np.ndarray, bad: dict, labels):
        """Serve sliding windows over one long column float64 [R] (bad: {row: message} of its bad cells)."""
        size, stride = self.source.window, self.source.stride
        self.count = max(0, (len(column) - size) // stride + 1)
        self.length = size
        self._column, self._bad, self._labels = column, bad, labels

    def _read_windows(self, start: int, stop: int):
        size, stride = self.source.window, self.source.stride
        first = np.arange(start, stop) * stride
        values = np.lib.stride_tricks.sliding_window_view(self._column, size)[first].astype(np.float32)
        labels = [None] * len(first) if self._labels is None else [self._labels[f + size - 1] for f in first]
        errors = {}
        if self._bad:
            bad_rows = np.array(sorted(self._bad))
            for w, f in zip(range(start, stop), first, strict=False):
                hit = bad_rows[(bad_rows >= f) & (bad_rows < f + size)]
                if len(hit):
                    errors[w] = (
                        f"window {w} (rows {f}..{f + size - 1} of column {self.source.column!r} of "
                        f"{self.source.path}): {self._bad[int(hit[0])]}"
                    )
        return values, labels, errors


class _NpyTable(_Table):
    def __init__(self, source: Source):
        super().__init__(source)
        try:
            self.array = np.load(source.path, mmap_mode="r", allow_pickle=False)
        except ValueError as error:
            raise ValueError(f"series: {source.path} is not a plain .npy array ({error})") from None
        if self.array.ndim != 2 or not np.issubdtype(self.array.dtype, np.number):
            raise ValueError(
                f"series: expected a numeric array [N,L] (one series per row) in {source.path}, got "
                f"{self.array.dtype} {self.array.shape}"
            )
        self.count, self.length = self.array.shape
        self.labels = None
        if source.labels:
            self.labels = np.load(source.labels, mmap_mode="r", allow_pickle=False)
            if self.labels.shape[:1] != (self.count,):
                raise ValueError(
                    f"--labels: expected {self.count} labels in {source.labels} (one per row of "
                    f"{source.path}), got shape {self.labels.shape}"
                )

    def _read(self, start, stop):
        labels = [None] * (stop - start) if self.labels is None else self.labels[start:stop].tolist()
        return np.array(self.array[start:stop], dtype=np.float32), labels, {}  # a copy: torch wants it writable


def _to_floats(cells, where):
    """A float64 array of `cells` (CSV text; empty is a gap, NaN) and the first bad cell's message."""
    out = np.empty(len(cells))
    for i, cell in enumerate(cells):
        cell = cell.strip()
        try:
            out[i] = float(cell) if cell else math.nan
        except ValueError:
            return out, f"{where}: cell {i + 1} {cell[:40]!r} is not a number"
    return out, None


class _CsvTable(_Table):
    """CSV: a header row is read when a column is named (--column, --label-column) or when no cell of
    the first row is a number. One series per row: every cell but the label's; or windows over one column."""

    def __init__(self, source: Source):
        super().__init__(source)
        with open(source.path, newline="") as f:
            rows = list(csv.reader(f))
        while rows and not rows[-1]:
            rows.pop()
        first = rows[0] if rows else []
        header = None
        if source.column or source.label_column or (first and all(_to_floats([c], "")[1] for c in first)):
            header, rows = [c.strip() for c in first], rows[1:]
        label_at = self._index(header, source.label_column)
        self.lines = np.arange(len(rows)) + (2 if header is not None else 1)
        labels = None if label_at is None else [r[label_at] if label_at < len(r) else None for r in rows]
        if source.window is not None:
            at = self._index(header, source.column)
            column, bad = np.empty(len(rows)), {}
            for i, r in enumerate(rows):
                value, message = _to_floats([r[at] if at < len(r) else ""], f"line {self.lines[i]}")
                column[i] = value[0]
                if message:
                    bad[i] = message
            self._windows(column, bad, labels)
            return
        keep = [i for i, r in enumerate(rows) if r]  # blank lines are no series
        rows, self.lines = [rows[i] for i in keep], self.lines[keep]
        self.labels = None if labels is None else [labels[i] for i in keep]
        self.rows = [[c for j, c in enumerate(r) if j != label_at] for r in rows]
        self.count = len(self.rows)
        self.length = source.length or (len(self.rows[0]) if self.rows else 0)

    def _index(self, header, name):
        if name is None:
            return None
        if header is None or name not in header:
            raise ValueError(
                f"--column/--label-column: no column {name!r} in the header of {self.source.path} "
                f"(columns: {', '.join(header or [])})"
            )
        return header.index(name)

    def where(self, row):
        return f"row {row} (line {self.lines[row]} of {self.source.path})"

    def _read(self, start, stop):
        if self.source.window is not None:
            return self._read_windows(start, stop)
        values = np.full((stop - start, self.length), np.nan, np.float32)
        errors = {}
        for i in range(start, stop):
            cells = self.rows[i]
            if len(cells) != self.length:
                errors[i] = f"{self.where(i)}: {len(cells)} values, expected {self.length}"
                continue
            values[i - start], message = _to_floats(cells, self.where(i))
            if message:
                errors[i] = message
        labels = [None] * (stop - start) if self.labels is None else self.labels[start:stop]
        return values, labels, errors


class _ParquetTable(_Table):
    """Parquet: row groups read as needed (one series per row: the numeric columns, or the list column
    `column`); for windows the column is read whole."""

    def __init__(self, source: Source):
        super().__init__(source)
        import pyarrow.parquet as pq
        import pyarrow.types as pt

        self.file = pq.ParquetFile(source.path)
        schema = self.file.schema_arrow
        for name in (source.column, source.label_column):
            if name is not None and name not in schema.names:
                raise ValueError(
                    f"--column/--label-column: no column {name!r} in {source.path} (columns: {', '.join(schema.names)})"
                )
        labels = None
        if source.label_column:
            labels = self.file.read(columns=[source.label_column]).column(0).to_pylist()
        if source.window is not None:
            column = self.file.read(columns=[source.column]).column(0)
            if not (pt.is_integer(column.type) or pt.is_floating(column.type)):
                raise ValueError(f"--column: {source.column!r} of {source.path} holds {column.type}, not numbers")
            self._windows(column.to_numpy(zero_copy_only=False).astype(np.float64), {}, labels)
            return
        self.labels = labels
        if source.column is not None:
            kind = schema.field(source.column).type
            if not (pt.is_list(kind) or pt.is_large_list(kind) or pt.is_fixed_size_list(kind)):
                raise ValueError(
                    f"--column: {source.column!r} of {source.path} holds {kind}; one series per row "
                    f"needs a list column (or --window to slide over a column of numbers)"
                )
            self.columns = [source.column]
        else:
            self.columns = [
                f.name
                for f in schema
                if f.name != source.label_column and (pt.is_integer(f.type) or pt.is_floating(f.type))
            ]
        self.count = self.file.metadata.num_rows
        self.starts = np.cumsum(
            [0] + [self.file.metadata.row_group(g).num_rows for g in range(self.file.num_row_groups)]
        )
        self.length = source.length or (len(self.columns) if source.column is None else self._first_length())

    def _first_length(self):
        if self.count == 0:
            return 0
        first = self.file.read_row_group(0, columns=self.columns).column(0)
        lengths = first.combine_chunks().value_lengths().fill_null(0).to_numpy(zero_copy_only=False)
        return int(lengths[0])

    def _read(self, start, stop):
        if self.source.window is not None:
            return self._read_windows(start, stop)
        groups = range(
            int(np.searchsorted(self.starts, start, "right")) - 1, int(np.searchsorted(self.starts, stop, "left"))
        )
        table = self.file.read_row_groups(list(groups), columns=self.columns)
        table = table.slice(start - int(self.starts[groups.start]), stop - start)
        labels = [None] * (stop - start) if self.labels is None else self.labels[start:stop]
        errors = {}
        if self.source.column is None:
            values = (
                np.stack([c.to_numpy(zero_copy_only=False).astype(np.float32) for c in table.columns], 1)
                if self.columns
                else np.empty((stop - start, 0), np.float32)
            )
            return values, labels, errors
        lists = table.column(0).combine_chunks()
        lengths = lists.value_lengths().fill_null(0).to_numpy(zero_copy_only=False)
        values = np.full((stop - start, self.length), np.nan, np.float32)
        good = lengths == self.length
        flat = lists.filter(good).flatten().to_numpy(zero_copy_only=False).astype(np.float32)
        values[good] = flat.reshape(-1, self.length)
        for i in np.flatnonzero(~good):
            errors[start + int(i)] = f"{self.where(start + int(i))}: {lengths[i]} values, expected {self.length}"
        return values, labels, errors


@dataclasses.dataclass(frozen=True)
class Job:
    """One dataset: `source` drawn as `plot`, written in `format` to `out`, `shard_size` rows a shard."""

    source: Source
    out: str
    format: str = "npy"
    plot: Plot = Plot()
    shard_size: int = 1000
    batch_size: int = 4096
    on_error: str = "skip"
    device: str | None = None

    def __post_init__(self):
        if self.format not in FORMATS:
            raise ValueError(f"--format: expected one of {', '.join(FORMATS)}, got {self.format!r}")
        if self.on_error not in ON_ERROR:
            raise ValueError(f"--on-error: expected skip or stop, got {self.on_error!r}")
        if self.shard_size < 1 or self.batch_size < 1:
            raise ValueError(f"--shard-size {self.shard_size} --batch-size {self.batch_size}: expected at least 1")

    def fingerprint(self) -> str:
        """What makes two runs' shards interchangeable: the source (path, size, reading options), the
        plot, the format and the shard size; not the device, batch size or worker count."""
        settings = dataclasses.asdict(self)
        for name in ("out", "batch_size", "on_error", "device"):
            settings.pop(name)
        settings["source_bytes"] = os.path.getsize(self.source.path)
        return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]

    def name(self, shard: int) -> str:
        return f"shard-{shard:06d}" + {"npy": ".npy", "wds": ".tar", "png": ""}[self.format]


def _sha256(data) -> str:
    return hashlib.sha256(data).hexdigest()


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def _replace(tmp: Path, final: Path) -> None:
    """Rename tmp to final, replacing a stale final (a folder of PNGs cannot be replaced in one rename)."""
    if final.is_dir():
        shutil.rmtree(final)
    os.replace(tmp, final)


def _write_json(path: Path, data) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def shard_digest(path: Path, fmt: str) -> str:
    """A shard's sha256: of the file (npy, wds); of its PNGs' sha256s in name order (png)."""
    if fmt != "png":
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            while block := f.read(1 << 22):
                digest.update(block)
        return digest.hexdigest()
    return _sha256("".join(_sha256(p.read_bytes()) for p in sorted(path.glob("*.png"))).encode())


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _pngs_1bit(rows: np.ndarray, width: int) -> list[bytes]:
    """1-bit greyscale PNGs of images' scanlines rows uint8 [n,H,1+ceil(W/8)] (each row its filter
    byte, 0, then its pixels as bits): a binary plot in 1/8 of the bytes to deflate, decoded to pixels
    0 and 255. Deflated by ISA-L (isal): 3x faster than zlib's fastest level on these plots (12 vs 35
    us a 224x224 plot) and 6% smaller; it releases the GIL while it deflates, so threads encode
    batches in parallel."""
    from isal import isal_zlib

    head = b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", width, rows.shape[1], 1, 0, 0, 0, 0))
    tail, idat = _chunk(b"IEND", b""), zlib.crc32(b"IDAT")
    pngs = []
    for image in rows:
        # a stream of its own: isal_zlib.compress (stateless) left small plots' bytes depending on what the
        # thread had deflated before (a hash table not wholly reset; the same pixels, other bytes)
        stream = isal_zlib.compressobj(1)
        data = stream.compress(image) + stream.flush()
        size, crc = struct.pack(">I", len(data)), struct.pack(">I", zlib.crc32(data, idat))
        pngs.append(b"".join((head, size, b"IDAT", data, crc, tail)))
    return pngs


def _tar(names: list[str], payloads: list[bytes]) -> list:
    """The pieces of a tar (to join or write in order) of members `names` holding `payloads`, as
    webdataset's TarWriter writes them with mtime 0, mode 0444, owner rasterkit, USTAR (tested byte
    for byte): tarfile builds one header and numpy sets every member's name, size and checksum in
    it, where tarfile's own writer takes 12-20 us a member, half a shard's Python time."""
    info = tarfile.TarInfo("")
    info.mtime, info.mode, info.uname, info.gname = 0, 0o444, "rasterkit", "rasterkit"
    template = np.frombuffer(info.tobuf(tarfile.USTAR_FORMAT), np.uint8)
    encoded = [name.encode() for name in names]
    if any(len(name) > 100 for name in encoded):
        raise ValueError("tar member names of at most 100 bytes expected (the USTAR name field)")
    headers = np.tile(template, (len(names), 1))
    headers[:, :100] = np.array(encoded, "S100").view(np.uint8).reshape(-1, 100)
    sizes = np.array([len(payload) for payload in payloads], np.int64)
    headers[:, 124:135] = (sizes[:, None] >> np.arange(30, -1, -3)) % 8 + ord("0")  # 11 octal digits, NUL
    headers[:, 148:156] = ord(" ")  # the checksum sums the header with its own field as spaces
    checksum = headers.sum(1, dtype=np.int64)
    headers[:, 148:154] = (checksum[:, None] >> np.arange(15, -1, -3)) % 8 + ord("0")  # 6 digits, NUL, space
    headers[:, 154] = 0
    pieces, pads = [], [bytes(k) for k in range(tarfile.BLOCKSIZE)]
    for header, payload, size in zip(headers, payloads, sizes.tolist(), strict=True):
        pieces += (header, payload, pads[-size % tarfile.BLOCKSIZE])
    # the end: two zero blocks, then zeros to a whole record
    end = 2 * tarfile.BLOCKSIZE
    total = len(names) * tarfile.BLOCKSIZE + int((sizes + (-sizes % tarfile.BLOCKSIZE)).sum()) + end
    pieces.append(bytes(end + -total % tarfile.RECORDSIZE))
    return pieces


def _encode_8bit(images: np.ndarray) -> list[bytes]:
    """PNGs of images uint8 [n,H,W] or [n,H,W,3] (RGB), by OpenCV (which releases the GIL too)."""
    import cv2

    flags = [cv2.IMWRITE_PNG_COMPRESSION, 1]
    images = images[..., ::-1] if images.ndim == 4 else images  # OpenCV's BGR
    return [cv2.imencode(".png", image, flags)[1].tobytes() for image in images]


class _Hashing:
    """A file that hashes what is written to it, so that a shard's sha256 needs no second read."""

    def __init__(self, file):
        self.file, self.digest = file, hashlib.sha256()

    def write(self, data) -> int:
        self.digest.update(data)
        return self.file.write(data)

    def tell(self) -> int:
        return self.file.tell()

    def flush(self) -> None:
        self.file.flush()


class Shards:
    """Renders and writes shards of a job; `write(k)` returns shard k's sidecar (also on disk)."""

    def __init__(self, job: Job):
        self.job = job
        self.table = job.source.open()
        self.out = Path(job.out)
        self.device = torch_device(job.device)
        self.key = job.fingerprint()
        self.pool = None  # a ThreadPoolExecutor to encode PNGs on, if any

    @property
    def count(self) -> int:
        return math.ceil(self.table.count / self.job.shard_size)

    def done(self, shard: int) -> dict | None:
        """The sidecar of shard k when the shard on disk is complete and belongs to this job, else None."""
        sidecar = self.out / (self.job.name(shard) + ".json")
        try:
            meta = json.loads(sidecar.read_text())
        except (OSError, ValueError):
            return None
        path = self.out / meta.get("file", "")
        if meta.get("job") != self.key or not path.exists() or shard_digest(path, self.job.format) != meta["sha256"]:
            return None
        return meta

    @property
    def binary(self) -> bool:
        """Whether PNGs are 1-bit: aliased 1-channel plots of an opaque line hold only 0 and 255."""
        plot = self.job.plot
        return self.job.format != "npy" and plot.mode == "aliased" and plot.channels == 1 and plot.color[3] == 1

    def render(self, values: np.ndarray) -> np.ndarray:
        """uint8 [n,H,W] (channels 1) or [n,H,W,3] of values float32 [n,L], batch_size at a time; for
        1-bit PNGs their scanlines uint8 [n,H,1+ceil(W/8)]: each row a filter byte (0), then its pixels
        as bits, drawn as such (render_polylines_packed: 1/8 of the bytes, no image to pack)."""
        plot, size = self.job.plot, self.job.batch_size
        if self.binary:
            rows = np.empty((len(values), plot.height, 1 + -(-plot.width // 8)), np.uint8)
            rows[..., 0] = 0
            for i in range(0, len(values), size):
                part = torch.from_numpy(values[i : i + size])
                rows[i : i + size, :, 1:] = render_polylines_packed(part, plot.height, plot.width, device=self.device)
            return rows
        extra = {} if plot.channels == 1 else {"background": plot.background}
        parts = [
            render_polylines(
                torch.from_numpy(values[i : i + size]),
                plot.height,
                plot.width,
                mode=plot.mode,
                line_width=plot.line_width,
                color=plot.color,
                channels=plot.channels,
                dtype=torch.uint8,
                device=self.device,
                **extra,
            ).numpy()
            for i in range(0, len(values), size)
        ]
        return np.concatenate(parts) if len(parts) != 1 else parts[0]

    def draw(self, shard: int):
        """Shard k's rows read and drawn: (rows, labels, pixels uint8 (render's), {row: message} of the malformed)."""
        job = self.job
        start = shard * job.shard_size
        stop = min(start + job.shard_size, self.table.count)
        values, labels, errors = self.table.read(start, stop)
        if errors and job.on_error == "stop":
            row = min(errors)
            raise ValueError(f"{errors[row]} (--on-error skip would leave it out and go on)")
        keep = [i for i in range(stop - start) if start + i not in errors]
        if keep:
            pixels = self.render(values[keep])
        else:
            plot = job.plot
            shape = (plot.height, -(-plot.width // 8) + 1) if self.binary else (plot.height, plot.width)
            pixels = np.empty((0, *shape) + ((3,) if plot.channels == 3 else ()), np.uint8)
        return [start + i for i in keep], [labels[i] for i in keep], pixels, errors

    def store(self, shard: int, drawn) -> dict:
        """Write a drawn shard under a temporary name, rename it, then write its sidecar; returns the sidecar."""
        job = self.job
        rows, labels, pixels, errors = drawn
        self.out.mkdir(parents=True, exist_ok=True)
        name = job.name(shard)
        final, tmp = self.out / name, self.out / (name + ".tmp")
        _remove(tmp)  # a partial shard of an interrupted run
        if job.format == "npy":
            with open(tmp, "wb") as f:
                hashed = _Hashing(f)
                np.save(hashed, pixels)
            digests, digest = [_sha256(image) for image in pixels], hashed.digest.hexdigest()
        else:
            pngs, digests = self._encode(pixels)
            digest = self._write_pngs(tmp, rows, labels, pngs, digests)
        _replace(tmp, final)
        meta = {
            "job": self.key,
            "shard": shard,
            "file": name,
            "sha256": digest,
            "rows": rows,
            "labels": labels,
            "sha256s": digests,
            "errors": [{"row": r, "error": errors[r]} for r in sorted(errors)],
        }
        _write_json(self.out / (name + ".json"), meta)
        return meta

    def write(self, shard: int) -> dict:
        return self.store(shard, self.draw(shard))

    def _encode(self, pixels: np.ndarray):
        """PNGs of a shard's pixels (render's) and their sha256s, on self.pool's threads in batches of
        _ENCODE_BATCH (one task a PNG would cost more to hand over than zlib takes)."""
        width = self.job.plot.width

        def encode(start):
            part = pixels[start : start + _ENCODE_BATCH]
            pngs = _pngs_1bit(part, width) if self.binary else _encode_8bit(part)
            return pngs, [_sha256(png) for png in pngs]

        starts = range(0, len(pixels), _ENCODE_BATCH)
        done = list(self.pool.map(encode, starts) if self.pool else map(encode, starts))
        return [png for pngs, _ in done for png in pngs], [digest for _, digests in done for digest in digests]

    def _write_pngs(self, tmp: Path, rows, labels, pngs, digests) -> str:
        """Write the PNGs as a tar or a folder; returns the shard's sha256 (as shard_digest computes it)."""
        if self.job.format == "png":
            tmp.mkdir()
            for row, png in zip(rows, pngs, strict=False):
                (tmp / f"{row:09d}.png").write_bytes(png)
            return _sha256("".join(digests).encode())
        # WebDataset samples: key the row; members in TarWriter's order (its keys sorted: cls, png, txt)
        names, payloads = [], []
        for row, label, png in zip(rows, labels, pngs, strict=True):
            key = f"{row:09d}"
            if isinstance(label, int):
                names += (f"{key}.cls", f"{key}.png")
                payloads += (str(label).encode(), png)
            else:
                names.append(f"{key}.png")
                payloads.append(png)
                if label is not None:
                    names.append(f"{key}.txt")
                    payloads.append(str(label).encode())
        data = b"".join(_tar(names, payloads))
        tmp.write_bytes(data)
        return _sha256(data)


def finish(job: Job, metas: list[dict]) -> dict:
    """Write index.csv (row, shard, offset, label, sha256) and index.json (the job, its shards with
    their sha256, the malformed rows) from the shards' sidecars; returns index.json's contents."""
    out = Path(job.out)
    metas = sorted(metas, key=lambda m: m["shard"])
    tmp = out / "index.csv.tmp"
    with open(tmp, "w", newline="") as f:
        table = csv.writer(f)
        table.writerow(["row", "shard", "file", "offset", "label", "sha256"])
        for meta in metas:
            for offset, (row, label, digest) in enumerate(
                zip(meta["rows"], meta["labels"], meta["sha256s"], strict=False)
            ):
                table.writerow([row, meta["shard"], meta["file"], offset, "" if label is None else label, digest])
    os.replace(tmp, out / "index.csv")
    settings = dataclasses.asdict(job)
    settings.pop("out")
    index = {
        "job": metas[0]["job"] if metas else job.fingerprint(),
        "settings": settings,
        "images": sum(len(m["rows"]) for m in metas),
        "shards": [{"file": m["file"], "images": len(m["rows"]), "sha256": m["sha256"]} for m in metas],
        "errors": [e for m in metas for e in m["errors"]],
    }
    _write_json(out / "index.json", index)
    return index


def _begin(job: Job, progress: bool):
    """The job's Shards, the sidecars of its shards already done (verified), the shards left to write
    and a progress bar that counts the done ones."""
    from tqdm import tqdm

    shards = Shards(job)
    metas = {k: m for k in range(shards.count) if (m := shards.done(k)) is not None}
    todo = [k for k in range(shards.count) if k not in metas]
    bar = tqdm(
        total=shards.table.count,
        unit="img",
        unit_scale=True,
        disable=not progress,
        initial=sum(len(m["rows"]) + len(m["errors"]) for m in metas.values()),
    )
    return shards, metas, todo, bar


def run(job: Job, progress: bool = True, processes: int = 1) -> dict:
    """The job on this machine: shards already done are skipped, the others written. One process (the
    default) uses every core: numba's loop draws shard k on torch's threads while a writer thread
    stores shard k-1, its PNGs deflated on a thread per core (ISA-L releases the GIL); the Python work
    left is ~5 us an image. `processes` > 1: that many worker processes (spawned, one torch thread
    each) write whole shards, as a Dask cluster's workers do (run_dask): for machines whose cores that
    Python work would leave idle. Each costs seconds to start (torch's import, numba's cache): on 2
    cores one process is the faster (bench/results/datasets.md). Returns index.json's contents."""
    shards, metas, todo, bar = _begin(job, progress)
    try:
        if processes > 1 and len(todo) > 1:
            import multiprocessing

            context = multiprocessing.get_context("spawn")  # no fork of a process that holds torch's threads
            with ProcessPoolExecutor(processes, context) as pool:
                futures = [pool.submit(_write_shard, k, job) for k in todo]
                try:
                    for future in as_completed(futures):
                        _collect(future, metas, bar)
                finally:
                    for future in futures:
                        future.cancel()
        else:
            with ThreadPoolExecutor(os.cpu_count()) as encoders, ThreadPoolExecutor(1) as writer:
                shards.pool = encoders
                pending = None
                for k in todo:
                    drawn = shards.draw(k)  # on torch's threads, while the writer thread stores shard k-1
                    if pending is not None:
                        _collect(pending, metas, bar)
                    pending = writer.submit(shards.store, k, drawn)
                if pending is not None:
                    _collect(pending, metas, bar)
    finally:
        bar.close()
    return finish(job, list(metas.values()))


_THREAD = threading.local()  # a worker thread's Shards (run's processes, a Dask worker's threads)


def _write_shard(shard: int, job: Job) -> dict:
    """A worker's task: shard k of the job, written by its thread's Shards, made for the thread's first
    shard of the job (the source opened, numba's loops loaded) with one torch thread: the workers are
    the parallelism. Returns the sidecar."""
    shards = getattr(_THREAD, "shards", None)
    if shards is None or shards.job != job:
        torch.set_num_threads(1)
        shards = _THREAD.shards = Shards(job)
    return shards.write(shard)


def _collect(future, metas, bar):
    meta = future.result()
    metas[meta["shard"]] = meta
    bar.update(len(meta["rows"]) + len(meta["errors"]))
    for error in meta["errors"]:
        bar.write(f"skipped {error['error']}", file=sys.stderr)


def run_dask(
    job: Job, address: str = "auto", workers: int | None = None, threads: int = 1, progress: bool = True
) -> dict:
    """The job on a Dask cluster: one task a shard (the same shard writer as `run`'s processes, so the
    same bytes), as many at once as the cluster has worker threads; shards already done are skipped.
    address "auto": a local cluster of `workers` processes of `threads` threads, by default a GPU each
    (pinned with CUDA_VISIBLE_DEVICES) where the job draws on CUDA, else a core each; or a scheduler's
    address ("tcp://host:8786"), whose workers need rasterkit installed and the source and `out` on
    storage they all see (`workers` and `threads` are then the cluster's). Returns index.json's contents."""
    from dask.distributed import Client
    from dask.distributed import as_completed as completed

    if threads < 1 or (workers is not None and workers < 1):
        raise ValueError(f"--dask-workers {workers} --dask-threads {threads}: expected at least 1")
    shards, metas, todo, bar = _begin(job, progress)
    try:
        if todo:
            gpus = _gpus(shards.device) if address == "auto" else []
            # a pinned worker sees its GPU alone; the device is no part of the job's fingerprint
            task_job = dataclasses.replace(job, device="cuda") if gpus else job
            with contextlib.ExitStack() as stack:
                cluster = address
                if address == "auto":
                    count = workers or len(gpus) or max(1, (os.cpu_count() or 1) // threads)
                    cluster = stack.enter_context(_local_cluster(count, threads, gpus))
                client = stack.enter_context(Client(cluster))
                for future in completed(client.map(_write_shard, todo, job=task_job, pure=False)):
                    _collect(future, metas, bar)
    finally:
        bar.close()
    return finish(job, list(metas.values()))


def _gpus(device: torch.device) -> list[str]:
    """CUDA_VISIBLE_DEVICES of a local cluster's workers, one GPU each: every GPU this process sees
    (choose them with CUDA_VISIBLE_DEVICES), none for a job off CUDA."""
    if device.type != "cuda":
        return []
    count = torch.cuda.device_count()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return visible.split(",")[:count] if visible else [str(i) for i in range(count)]


def _local_cluster(workers: int, threads: int, gpus: list[str]):
    """A Dask cluster on this machine: `workers` processes of `threads` threads, worker i pinned to
    gpus[i % len(gpus)] when there are GPUs."""
    from dask.distributed import Nanny, Scheduler, SpecCluster

    options = {"host": "127.0.0.1", "nthreads": threads, "silence_logs": logging.WARNING}
    spec = {
        i: {
            "cls": Nanny,
            "options": {**options, "env": {"CUDA_VISIBLE_DEVICES": gpus[i % len(gpus)]}} if gpus else options,
        }
        for i in range(workers)
    }
    scheduler = {"cls": Scheduler, "options": {"host": "127.0.0.1", "dashboard": False}}
    return SpecCluster(workers=spec, scheduler=scheduler, silence_logs=logging.WARNING)
