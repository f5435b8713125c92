"""The line-plot dataset job and the `rasterkit plots` CLI (utils/datasets.py, utils/cli.py): every input
and output format, malformed rows, interrupted runs resumed, the same bytes on every run."""

import csv
import json
import tarfile

import cv2
import numpy as np
import pytest
import torch

from rasterkit.utils import datasets as D
from rasterkit.utils.cli import main
from rasterkit.utils.gpu_rendering import render_polylines

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
pytest.importorskip("webdataset")
pytest.importorskip("isal")
pytest.importorskip("tqdm")

N, L, SIZE, SHARD = 300, 40, 32, 64


@pytest.fixture(scope="module")
def series():
    return np.cumsum(np.random.default_rng(0).standard_normal((N, L)), 1).astype(np.float32)


def expected(values):
    return render_polylines(torch.from_numpy(np.asarray(values, np.float32)), SIZE, SIZE, dtype=torch.uint8).numpy()


def job(source, out, **options):
    return D.Job(source, str(out), plot=D.Plot(width=SIZE, height=SIZE), shard_size=SHARD, batch_size=50, **options)


def tree(folder):
    """{relative path: bytes} of every file under folder."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def images(out, fmt):
    """The dataset's images in row order, decoded, and index.csv's rows."""
    rows = list(csv.DictReader(open(out / "index.csv")))
    if fmt == "npy":
        return np.concatenate([np.load(p) for p in sorted(out.glob("shard-*.npy"))]), rows
    if fmt == "png":
        pngs = [p.read_bytes() for p in sorted(out.glob("shard-*[0-9]/*.png"))]
    else:
        pngs = []
        for path in sorted(out.glob("shard-*.tar")):
            with tarfile.open(path) as tar:
                pngs += [tar.extractfile(m).read() for m in tar.getmembers() if m.name.endswith(".png")]
    return np.stack([cv2.imdecode(np.frombuffer(p, np.uint8), cv2.IMREAD_UNCHANGED) for p in pngs]), rows


@pytest.mark.parametrize("fmt", D.FORMATS)
def test_npy_input_every_format_same_bytes_twice(tmp_path, series, fmt):
    np.save(tmp_path / "s.npy", series)
    np.save(tmp_path / "labels.npy", np.arange(N) % 3)
    source = D.source_for(str(tmp_path / "s.npy"), labels=str(tmp_path / "labels.npy"))
    index = D.run(job(source, tmp_path / "a", format=fmt), progress=False)
    D.run(job(source, tmp_path / "b", format=fmt), progress=False)
    assert tree(tmp_path / "a") == tree(tmp_path / "b")
    assert index["images"] == N and len(index["shards"]) == -(-N // SHARD) and not index["errors"]
    got, rows = images(tmp_path / "a", fmt)
    np.testing.assert_array_equal(got, expected(series))
    assert [int(r["row"]) for r in rows] == list(range(N))
    assert [int(r["shard"]) for r in rows] == [i // SHARD for i in range(N)]
    assert [int(r["offset"]) for r in rows] == [i % SHARD for i in range(N)]
    assert [r["label"] for r in rows] == [str(i % 3) for i in range(N)]
    if fmt == "npy":  # sha256 of each image's pixels
        assert all(r["sha256"] == D._sha256(image) for r, image in zip(rows, got, strict=False))
    if fmt == "wds":
        with tarfile.open(tmp_path / "a" / "shard-000000.tar") as tar:
            names = tar.getnames()
            assert names[:2] == ["000000000.cls", "000000000.png"] and tar.getmember(names[0]).mtime == 0


@pytest.mark.parametrize("labels", ["int", "text", None])
def test_tars_are_the_bytes_webdatasets_tarwriter_writes(tmp_path, series, labels):
    import io

    import webdataset

    np.save(tmp_path / "s.npy", series[:100])
    if labels:
        np.save(tmp_path / "l.npy", np.arange(100) % 3 if labels == "int" else np.array([f"c{i}" for i in range(100)]))
    source = D.source_for(str(tmp_path / "s.npy"), labels=str(tmp_path / "l.npy") if labels else None)
    D.run(job(source, tmp_path / "out", format="wds"), progress=False)
    for path in sorted((tmp_path / "out").glob("*.tar")):
        with tarfile.open(path) as tar:
            members = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}
        stream = io.BytesIO()
        writer = webdataset.TarWriter(stream, user="rasterkit", group="rasterkit", mtime=0, format=tarfile.USTAR_FORMAT)
        for key in sorted({name.split(".")[0] for name in members}):
            writer.write({"__key__": key, **{n.split(".")[1]: v for n, v in members.items() if n.startswith(key)}})
        writer.close()
        assert path.read_bytes() == stream.getvalue()
    # members of every size about a block's, and the end's padding to a whole record
    payloads = [b"x" * size for size in (0, 1, 511, 512, 513, 10240, 20000)]
    names = [f"{i:09d}.bin" for i in range(len(payloads))]
    stream = io.BytesIO()
    writer = webdataset.TarWriter(stream, user="rasterkit", group="rasterkit", mtime=0, format=tarfile.USTAR_FORMAT)
    for name, payload in zip(names, payloads, strict=True):
        writer.write({"__key__": name[:9], "bin": payload})
    writer.close()
    assert b"".join(D._tar(names, payloads)) == stream.getvalue()


def test_parquet_wide_list_and_windows_with_labels(tmp_path, series):
    wide = pa.table({**{f"t{j}": series[:, j] for j in range(L)}, "label": [f"c{i}" for i in range(N)]})
    pq.write_table(wide, tmp_path / "wide.parquet", row_group_size=70)  # shards straddle row groups
    D.run(job(D.source_for(str(tmp_path / "wide.parquet"), label_column="label"), tmp_path / "wide"), progress=False)
    got, rows = images(tmp_path / "wide", "npy")
    np.testing.assert_array_equal(got, expected(series))
    assert [r["label"] for r in rows] == [f"c{i}" for i in range(N)]

    lists = pa.table({"y": [list(map(float, s)) for s in series], "label": list(range(N))})
    pq.write_table(lists, tmp_path / "lists.parquet", row_group_size=100)
    D.run(
        job(D.source_for(str(tmp_path / "lists.parquet"), column="y", label_column="label"), tmp_path / "lists"),
        progress=False,
    )
    np.testing.assert_array_equal(images(tmp_path / "lists", "npy")[0], expected(series))

    long = series[:3].ravel()
    pq.write_table(pa.table({"close": long, "day": np.arange(len(long))}), tmp_path / "long.parquet")
    source = D.source_for(str(tmp_path / "long.parquet"), column="close", label_column="day", window=20, stride=7)
    D.run(job(source, tmp_path / "win"), progress=False)
    got, rows = images(tmp_path / "win", "npy")
    starts = np.arange(0, len(long) - 20 + 1, 7)
    np.testing.assert_array_equal(got, expected(np.stack([long[s : s + 20] for s in starts])))
    assert [int(r["label"]) for r in rows] == list(starts + 19)  # the label at the window's last row


def test_csv_rows_and_windows(tmp_path, series):
    text = "label," + ",".join(f"t{j}" for j in range(L)) + "\n"
    text += "".join(f"k{i}," + ",".join(repr(float(v)) for v in s) + "\n" for i, s in enumerate(series[:100]))
    (tmp_path / "rows.csv").write_text(text)
    D.run(job(D.source_for(str(tmp_path / "rows.csv"), label_column="label"), tmp_path / "rows"), progress=False)
    got, rows = images(tmp_path / "rows", "npy")
    np.testing.assert_array_equal(got, expected(series[:100]))
    assert rows[5]["label"] == "k5"

    (tmp_path / "plain.csv").write_text("".join(",".join(repr(float(v)) for v in s) + "\n" for s in series[:10]))
    D.run(job(D.source_for(str(tmp_path / "plain.csv")), tmp_path / "plain"), progress=False)
    np.testing.assert_array_equal(images(tmp_path / "plain", "npy")[0], expected(series[:10]))

    long = series[0]
    (tmp_path / "long.csv").write_text("close,y\n" + "".join(f"{v!r},{i % 2}\n" for i, v in enumerate(long.tolist())))
    source = D.source_for(str(tmp_path / "long.csv"), column="close", label_column="y", window=10, stride=5)
    D.run(job(source, tmp_path / "win"), progress=False)
    got, rows = images(tmp_path / "win", "npy")
    np.testing.assert_array_equal(got, expected(np.stack([long[s : s + 10] for s in range(0, L - 9, 5)])))
    assert [r["label"] for r in rows] == [str((s + 9) % 2) for s in range(0, L - 9, 5)]


def malformed_csv(path, series):
    lines = [",".join(repr(float(v)) for v in s) for s in series[:100]]
    lines[7] = lines[7].replace(lines[7].split(",")[3], "abc", 1)  # a non-numeric cell
    lines[20] = ",".join(lines[20].split(",")[:-5])  # too short
    lines[66] = ",".join(["nan"] * L)  # no finite value
    path.write_text("\n".join(lines) + "\n")


def test_malformed_rows_skipped_and_named(tmp_path, series):
    malformed_csv(tmp_path / "bad.csv", series)
    index = D.run(job(D.source_for(str(tmp_path / "bad.csv")), tmp_path / "out"), progress=False)
    assert [e["row"] for e in index["errors"]] == [7, 20, 66]
    messages = [e["error"] for e in index["errors"]]
    assert "row 7 (line 8 of" in messages[0] and "'abc' is not a number" in messages[0]
    assert "row 20" in messages[1] and f"{L - 5} values, expected {L}" in messages[1]
    assert "row 66" in messages[2] and "no finite value" in messages[2]
    got, rows = images(tmp_path / "out", "npy")
    kept = [i for i in range(100) if i not in (7, 20, 66)]
    assert [int(r["row"]) for r in rows] == kept
    np.testing.assert_array_equal(got, expected(series[kept]))

    with pytest.raises(ValueError, match=r"row 7 \(line 8 of .*'abc' is not a number"):
        D.run(job(D.source_for(str(tmp_path / "bad.csv")), tmp_path / "stop", on_error="stop"), progress=False)


def test_cli_errors_and_summary(tmp_path, series, capsys):
    malformed_csv(tmp_path / "bad.csv", series)
    common = ["plots", str(tmp_path / "bad.csv"), "--width", str(SIZE), "--height", str(SIZE), "--no-progress"]
    assert main(common + ["--out", str(tmp_path / "o"), "--on-error", "stop"]) == 2
    assert "error: row 7 (line 8" in capsys.readouterr().err
    assert main(common + ["--out", str(tmp_path / "o"), "--format", "wds"]) == 0
    out, err = capsys.readouterr()
    assert "97 images in 1 shard in" in out and "skipped row 20 (line 21" in err
    assert main(common + ["--out", str(tmp_path / "p"), "--color", "red"]) == 2
    assert "--color: expected a hex colour" in capsys.readouterr().err
    assert main(["plots", str(tmp_path / "missing.npy"), "--out", str(tmp_path / "q")]) == 2
    assert "no file" in capsys.readouterr().err
    np.save(tmp_path / "three.npy", np.zeros((2, 3, 4)))
    assert main(["plots", str(tmp_path / "three.npy"), "--out", str(tmp_path / "q")]) == 2
    assert "expected a numeric array [N,L]" in capsys.readouterr().err


@pytest.mark.parametrize("fmt", ["npy", "png"])
def test_interrupted_run_resumes_to_the_same_bytes(tmp_path, series, monkeypatch, fmt):
    np.save(tmp_path / "s.npy", series)
    source = D.source_for(str(tmp_path / "s.npy"))
    D.run(job(source, tmp_path / "whole", format=fmt), progress=False)

    store = D.Shards.store
    written = []

    def failing(self, shard, drawn):
        if shard == 3:
            raise RuntimeError("killed")
        written.append(shard)
        return store(self, shard, drawn)

    monkeypatch.setattr(D.Shards, "store", failing)
    with pytest.raises(RuntimeError, match="killed"):
        D.run(job(source, tmp_path / "resumed", format=fmt), progress=False)
    assert written == [0, 1, 2] and not (tmp_path / "resumed" / "index.json").exists()
    # a half-written shard left by a crash, and a finished shard whose bytes went bad
    (tmp_path / "resumed" / (job(source, "", format=fmt).name(3) + ".tmp")).write_bytes(b"partial")
    damaged = tmp_path / "resumed" / job(source, "", format=fmt).name(1)
    target = damaged if fmt == "npy" else next(damaged.glob("*.png"))
    data = target.read_bytes()
    target.write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))

    written.clear()
    counting = lambda self, shard, drawn: written.append(shard) or store(self, shard, drawn)  # noqa: E731
    monkeypatch.setattr(D.Shards, "store", counting)
    D.run(job(source, tmp_path / "resumed", format=fmt), progress=False)
    assert written == [1, 3, 4]  # 0 and 2 verified and skipped, 1 rewritten
    assert tree(tmp_path / "resumed") == tree(tmp_path / "whole")


def test_changed_job_rewrites_shards(tmp_path, series):
    np.save(tmp_path / "s.npy", series)
    source = D.source_for(str(tmp_path / "s.npy"))
    D.run(job(source, tmp_path / "out"), progress=False)
    wider = D.Job(source, str(tmp_path / "out"), plot=D.Plot(width=SIZE + 8, height=SIZE), shard_size=SHARD)
    D.run(wider, progress=False)
    assert np.load(tmp_path / "out" / "shard-000000.npy").shape == (SHARD, SIZE, SIZE + 8)
    assert json.loads((tmp_path / "out" / "index.json").read_text())["settings"]["plot"]["width"] == SIZE + 8


def test_rgb_antialiased_png(tmp_path, series):
    np.save(tmp_path / "s.npy", series[:20])
    plot = D.Plot(
        width=SIZE,
        height=SIZE,
        mode="antialiased",
        line_width=2,
        channels=3,
        color=(1.0, 0.0, 0.0, 1.0),
        background=(0.0, 0.0, 1.0),
    )
    D.run(D.Job(D.source_for(str(tmp_path / "s.npy")), str(tmp_path / "o"), format="png", plot=plot), progress=False)
    got = cv2.cvtColor(cv2.imread(str(tmp_path / "o" / "shard-000000" / "000000004.png")), cv2.COLOR_BGR2RGB)
    want = render_polylines(
        torch.from_numpy(series[4:5]),
        SIZE,
        SIZE,
        mode="antialiased",
        line_width=2,
        color=(1.0, 0.0, 0.0, 1.0),
        background=(0.0, 0.0, 1.0),
        channels=3,
        dtype=torch.uint8,
    )
    np.testing.assert_array_equal(got, want[0].numpy())


def test_worker_processes_write_the_same_bytes(tmp_path, series):
    # utils.datasets, not the pack's rasterkit.utils: spawned workers import the job's module by name
    from utils import datasets as U

    np.save(tmp_path / "s.npy", series[:150])
    source, plot = U.source_for(str(tmp_path / "s.npy")), U.Plot(width=SIZE, height=SIZE)
    one, two = (U.Job(source, str(tmp_path / name), "wds", plot, shard_size=SHARD) for name in ("one", "two"))
    assert U.run(two, progress=False, processes=2) == U.run(one, progress=False)
    assert tree(tmp_path / "two") == tree(tmp_path / "one")
