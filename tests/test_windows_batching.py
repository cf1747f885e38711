import numpy as np
import pytest

from ernie_ft.data.batching import LengthGroupedSampler, collate, padding_fraction
from ernie_ft.data.windows import pool_windows, window_owner, window_spans, windowed_inputs


@pytest.mark.parametrize("n,size,stride", [(1, 8, 2), (8, 8, 2), (9, 8, 2), (50, 8, 3), (100, 10, 0)])
def test_window_spans_cover_every_token_with_the_overlap(n, size, stride):
    spans = window_spans(n, size, stride)
    covered = set()
    for start, end in spans:
        assert 0 <= start < end <= n and end - start == min(size, n)
        covered.update(range(start, end))
    assert covered == set(range(n))
    for (s1, e1), (s2, _) in zip(spans, spans[1:]):
        assert s2 > s1 and e1 - s2 >= stride  # consecutive windows share at least `stride` tokens


def test_window_owner_gives_each_token_to_the_window_where_it_has_most_context():
    windows = [(0, 10), (6, 16), (10, 20)]
    expected = [0] * 8 + [1] * 5 + [2] * 7
    assert window_owner(windows, 20, open_ends=True).tolist() == expected  # NER's rule
    assert window_owner(windows, 20, length_bonus=0.01).tolist() == expected  # BERT's (QA)
    for n, size, stride in [(50, 8, 3), (100, 10, 0), (37, 12, 5), (9, 8, 2)]:
        spans = window_spans(n, size, stride)
        np.testing.assert_array_equal(window_owner(spans, n, open_ends=True), window_owner(spans, n, length_bonus=0.01))
    # Elsewhere the rules differ: an edge at the text's end cuts nothing, or the longer window wins a tie.
    assert window_owner([(1, 2), (1, 3)], 3, open_ends=True).tolist() == [-1, 0, 1]
    assert window_owner([(1, 2), (1, 3)], 3, length_bonus=0.01).tolist() == [-1, 1, 1]


def test_windowed_inputs_never_exceed_max_len_and_keep_the_pair():
    first, second = list(range(10, 110)), list(range(200, 260))
    windows, cut = windowed_inputs(first, second, max_len=32, stride=4, cls_id=1, sep_id=2)
    assert cut  # 60 pair tokens > (32 - 3) // 2
    for ids, types in windows:
        assert len(ids) == len(types) <= 32
        assert ids[0] == 1 and ids[-1] == 2 and ids.count(2) == 2
        assert ids[-15:-1] == second[:14] and types[-1] == 1
    seen = {t for ids, _ in windows for t in ids if 10 <= t < 110}
    assert seen == set(first)


def test_pool_windows_mean_and_max():
    logits = np.array([[1.0, 0.0], [3.0, 2.0], [5.0, -1.0]], dtype=np.float32)
    docs = np.array([0, 0, 1])
    np.testing.assert_allclose(pool_windows(logits, docs, 2, "mean"), [[2.0, 1.0], [5.0, -1.0]])
    np.testing.assert_allclose(pool_windows(logits, docs, 2, "max"), [[3.0, 2.0], [5.0, -1.0]])


def test_sampler_is_reproducible_complete_and_groups_lengths():
    rng = np.random.default_rng(0)
    lengths = rng.integers(3, 128, size=1000)
    sampler = LengthGroupedSampler(lengths, 16, seed=7)
    epoch0 = sampler.batches(0)
    assert epoch0 == LengthGroupedSampler(lengths, 16, seed=7).batches(0)
    assert epoch0 != sampler.batches(1)
    assert sorted(i for b in epoch0 for i in b) == list(range(1000))
    ungrouped = LengthGroupedSampler(lengths, 16, seed=7, group=False).batches(0)
    assert padding_fraction(epoch0, lengths) < 0.1 < padding_fraction(ungrouped, lengths)


def test_replicas_split_the_global_batches_of_a_single_process():
    lengths = np.random.default_rng(1).integers(3, 128, size=203)
    single = LengthGroupedSampler(lengths, 8, seed=3).batches(2)  # one process, batch 8
    shards = [LengthGroupedSampler(lengths, 4, seed=3, num_replicas=2, rank=r).batches(2) for r in range(2)]
    full = [b for b in single if len(b) == 8]
    assert len(shards[0]) == len(shards[1]) == len(full)
    for whole, first, second in zip(full, *shards):
        assert first + second == whole


def test_collate_pads_inputs_and_stacks_or_pads_labels():
    features = [
        {"input_ids": [1, 5, 2], "token_type_ids": [0, 0, 0], "labels": 1, "doc": 0},
        {"input_ids": [1, 2], "token_type_ids": [0, 0], "labels": 0, "doc": 1},
    ]
    batch = collate(features, pad_id=0)
    assert batch["input_ids"].tolist() == [[1, 5, 2], [1, 2, 0]]
    assert batch["labels"].tolist() == [1, 0] and "doc" not in batch
    multi = collate([{**f, "labels": [0.0, 1.0]} for f in features], pad_id=0)
    assert multi["labels"].dtype == np.float32
    tokens = collate([{**f, "labels": [-100] + [3] * (len(f["input_ids"]) - 1)} for f in features], 0, True)
    assert tokens["labels"].tolist() == [[-100, 3, 3], [-100, 3, -100]]
