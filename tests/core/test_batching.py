import torch

from rasterkit.utils.core.batching import Ragged, pack, unpack


def test_pack_pads_and_records_lengths():
    ragged = pack([[[1, 2], [3, 4]], [], [[5, 6]]], feature_shape=(2,), pad_value=-1)
    assert ragged.values.shape == (3, 2, 2)
    assert ragged.lengths.tolist() == [2, 0, 1]
    assert ragged.values[2, 1].tolist() == [-1, -1]
    assert ragged.mask().tolist() == [[True, True], [False, False], [True, False]]


def test_flat_and_unpack_round_trip():
    seqs = [torch.rand(n, 3) for n in (4, 0, 2)]
    ragged = pack(seqs, feature_shape=(3,))
    values, batch_index = ragged.flat()
    assert batch_index.tolist() == [0, 0, 0, 0, 2, 2]
    assert torch.allclose(values, torch.cat(seqs))
    for a, b in zip(unpack(ragged), seqs, strict=False):
        assert torch.allclose(a, b)


def test_to_moves_values_and_lengths_together():
    ragged = pack([[1.0, 2.0], [3.0]]).to("cpu", torch.float64)
    assert ragged.values.dtype == torch.float64 and isinstance(ragged, Ragged)


def test_empty_batch():
    ragged = pack([])
    assert ragged.values.shape == (0, 0) and ragged.batch == 0
