"""SharedCorpus: appending, eviction, errors and lifetime."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import ngramspec


def test_append_counts_records_and_tokens() -> None:
    with ngramspec.SharedCorpus(1 << 20) as corpus:
        assert corpus.size == 0
        assert corpus.records == 0
        assert corpus.capacity_tokens > 0
        assert corpus.capacity_tokens & (corpus.capacity_tokens - 1) == 0  # a power of two
        assert corpus.memory_bytes > 0
        corpus.append([5, 6, 7, 8])
        corpus.append(np.arange(10, 20, dtype=np.uint32))
        corpus.append(np.arange(10, 20, dtype=np.int64))
        assert corpus.records == 3
        assert corpus.size >= 24
        corpus.clear()
        assert corpus.size == 0
    assert corpus.closed
    assert "closed" in repr(corpus)


def test_eviction_keeps_the_size_within_the_capacity() -> None:
    corpus = ngramspec.SharedCorpus(64 * 1024)
    capacity = corpus.capacity_tokens
    for i in range(8):
        corpus.append(np.arange(capacity // 2, dtype=np.uint32) + i)
    assert corpus.size <= capacity
    assert corpus.records == 8


def test_a_corpus_too_small_is_a_value_error_with_the_library_message() -> None:
    with pytest.raises(ValueError, match="max_bytes"):
        ngramspec.SharedCorpus(1)
    with pytest.raises(ValueError, match="max_bytes"):
        ngramspec.SharedCorpus(-1)


def test_calls_on_a_closed_corpus_raise() -> None:
    corpus = ngramspec.SharedCorpus(1 << 16)
    corpus.close()
    corpus.close()  # again: nothing
    calls = {
        "append": lambda: corpus.append([1, 2, 3]),
        "clear": lambda: corpus.clear(),
        "draft": lambda: corpus.draft([1, 2]),
        "save": lambda: corpus.save("unused.ngc"),
        "load": lambda: corpus.load("unused.ngc"),
    }
    for name, call in calls.items():
        with pytest.raises(ValueError, match=f"^ngramspec.SharedCorpus.{name}: the SharedCorpus is closed$"):
            call()
    assert corpus.size == 0


def test_a_drafter_keeps_its_corpus_alive_past_close() -> None:
    corpus = ngramspec.SharedCorpus(1 << 20)
    corpus.append(list(range(100, 164)))
    drafter = ngramspec.MatchDrafter(corpus=corpus)
    batch = ngramspec.BatchSpeculator(max_sequences=2, corpus=corpus)
    assert drafter.corpus is corpus and batch.corpus is corpus
    corpus.close()  # the native corpus stays until the drafter and the batch are done with it
    assert corpus._native is not None
    drafter.update(list(range(100, 120)))
    assert list(drafter.predict(4)) == [120, 121, 122, 123]  # copied from the corpus
    del drafter
    gc.collect()
    assert corpus._native is not None
    batch.close()
    assert corpus._native is None


def test_dropping_every_reference_frees_everything() -> None:
    corpus = ngramspec.SharedCorpus(1 << 16)
    drafter = ngramspec.MatchDrafter(corpus=corpus)
    del corpus  # the drafter still holds it
    assert drafter.corpus is not None
    assert drafter.corpus._native is not None
    del drafter
    gc.collect()


def test_a_closed_corpus_cannot_be_given_to_a_new_drafter() -> None:
    corpus = ngramspec.SharedCorpus(1 << 16)
    corpus.close()
    with pytest.raises(ValueError, match="closed"):
        ngramspec.MatchDrafter(corpus=corpus)
    with pytest.raises(TypeError):
        ngramspec.MatchDrafter(corpus="not a corpus")  # type: ignore[arg-type]
