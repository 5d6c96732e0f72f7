"""Corpus files: SharedCorpus.save and load, MappedCorpus, and drafters and batches consulting a file."""

from __future__ import annotations

import gc
import os
import random
import struct
from pathlib import Path

import numpy as np
import pytest

import ngramspec
from ngramspec import BatchSpeculator, CorpusFileError, MappedCorpus, MatchDrafter, SharedCorpus

HEADER_BYTES = 384  # format version 2
SECTIONS_AT = 72  # the section table's offset in the header; 40 bytes per section: id, max_probe, offset, ...
VOCABULARY_AT = 312  # u64 vocab_size, u64 tokenizer_fingerprint
HEADER_CHECKSUM_AT = 376


def checksum(data: bytes) -> int:
    """The format's checksum, as docs/CORPUS_FORMAT.md defines it."""
    mask = (1 << 64) - 1

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (64 - r))) & mask

    lanes = [0x243F6A8885A308D3, 0x13198A2E03707344, 0xA4093822299F31D0, 0x082EFA98EC4E6C89]
    padded = data + bytes(-len(data) % 32)
    for at in range(0, len(padded), 32):
        for i in range(4):
            word = struct.unpack_from("<Q", padded, at + 8 * i)[0]
            lanes[i] = rotl(((lanes[i] ^ word) * 0x9E3779B185EBCA87) & mask, 31)
    h = lanes[0] ^ rotl(lanes[1], 16) ^ rotl(lanes[2], 32) ^ rotl(lanes[3], 48) ^ len(data)
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & mask
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & mask
    return h ^ (h >> 33)


def with_vocabulary(data: bytes, vocab_size: int, fingerprint: int) -> bytes:
    """The file `data` recording another vocabulary, its header's checksum made to hold."""
    out = bytearray(data)
    struct.pack_into("<QQ", out, VOCABULARY_AT, vocab_size, fingerprint)
    struct.pack_into("<Q", out, HEADER_CHECKSUM_AT, checksum(bytes(out[:HEADER_CHECKSUM_AT])))
    return bytes(out)


def random_corpus(rng: random.Random, max_bytes: int, vocab: int, records: int) -> tuple[SharedCorpus, list[int]]:
    """A corpus of random records, and every token appended (for contexts that match)."""
    corpus = SharedCorpus(max_bytes)
    appended: list[int] = []
    for r in range(records):
        record = [rng.randrange(vocab) for _ in range(rng.randrange(40))]
        appended += record
        if rng.random() < 0.5:
            corpus.append(record, stamp=1000 + 10 * r)
        else:
            corpus.append(np.array(record, np.uint32))
    return corpus, appended


def probe_context(rng: random.Random, held: list[int], vocab: int) -> list[int]:
    """A context ending in the corpus's own text mostly (so that it matches), else random tokens."""
    context = [rng.randrange(vocab) for _ in range(rng.randrange(5))]
    if held and rng.random() < 0.75:
        end = rng.randrange(1, len(held) + 1)
        context += held[max(0, end - rng.randrange(1, 80)):end]
    return context


def same(a: ngramspec.CorpusDraft, b: ngramspec.CorpusDraft) -> bool:
    return a.match_length == b.match_length and a.tokens.tolist() == b.tokens.tolist()


def test_save_load_and_map_draft_as_the_live_corpus(tmp_path: Path) -> None:
    rng = random.Random(20260301)
    matched = 0
    for trial in range(12):
        vocab = rng.randrange(2, 40)
        max_bytes = (1 << 16) << rng.randrange(3)
        live, appended = random_corpus(rng, max_bytes, vocab, rng.randrange(50))
        path = tmp_path / f"trial{trial}.ngc"
        live.save(path if trial % 2 else str(path))  # an os.PathLike or a str
        with MappedCorpus(path) as mapped:
            mapped.verify()
            assert mapped.path == str(path)
            assert mapped.size == len(mapped) == live.size
            assert mapped.file_bytes == os.path.getsize(path)
            assert mapped.last_stamp == live.last_stamp
            assert mapped.first_stamp <= mapped.last_stamp
            assert mapped.records <= live.records
            loaded = SharedCorpus(max_bytes)
            loaded.append([1, 2, 3])  # replaced by the load
            loaded.load(path)
            assert loaded.size == live.size
            assert loaded.records == mapped.records
            assert loaded.last_stamp == live.last_stamp
            for _ in range(150):
                context = probe_context(rng, appended, vocab)
                room = rng.randrange(20)
                expected = live.draft(context, room)
                assert expected.tokens.dtype == np.uint32 and len(expected.tokens) <= room
                assert same(mapped.draft(context, room), expected), context
                assert same(loaded.draft(np.array(context, np.int64), room), expected), context
                matched += len(expected.tokens)
        assert mapped.closed
    assert matched > 2000, "the contexts must match for the comparison to say anything"


def test_stamps_round_trip_and_only_increase(tmp_path: Path) -> None:
    corpus = SharedCorpus(1 << 16)
    assert corpus.last_stamp == 0
    corpus.append([1, 2, 3], stamp=100)
    corpus.append([4, 5], stamp=50)  # raised to 101
    assert corpus.last_stamp == 101
    corpus.append([6], stamp=np.int64(200))
    corpus.append([], stamp=900)  # nothing
    assert corpus.last_stamp == 200 and corpus.records == 3
    corpus.save(os.fsencode(tmp_path / "c.ngc"))  # bytes
    with MappedCorpus(tmp_path / "c.ngc") as mapped:
        assert (mapped.records, mapped.size, mapped.first_stamp, mapped.last_stamp) == (3, 6, 100, 200)
        assert "3 records" in repr(mapped)
    corpus.append([7, 8])  # stamped with the time now, in nanoseconds
    assert corpus.last_stamp > 1 << 60
    with pytest.raises(TypeError, match="stamp"):
        corpus.append([1], stamp=1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="stamp"):
        corpus.append([1], stamp=1 << 63)


def test_an_empty_corpus_saves_and_maps_to_an_empty_file(tmp_path: Path) -> None:
    SharedCorpus(1 << 16).save(tmp_path / "empty.ngc")
    with MappedCorpus(tmp_path / "empty.ngc") as mapped:
        mapped.verify()
        assert len(mapped) == 0 and mapped.records == 0 and mapped.first_stamp == mapped.last_stamp == 0
        found = mapped.draft([1, 2, 3], 4)
        assert len(found.tokens) == 0 and found.match_length == 0


def good_file(tmp_path: Path) -> Path:
    corpus = SharedCorpus(1 << 16)
    for i in range(8):
        corpus.append([(7 * i + j) % 23 for j in range(30)])
    path = tmp_path / "good.ngc"
    corpus.save(path)
    return path


def spoiled(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_bad_files_raise_corpus_file_errors_naming_the_file_and_the_section(tmp_path: Path) -> None:
    assert issubclass(CorpusFileError, ngramspec.NgramspecError)
    data = good_file(tmp_path).read_bytes()
    tokens_offset = struct.unpack_from("<Q", data, SECTIONS_AT + 8)[0]  # the first section's offset
    missing = tmp_path / "missing.ngc"
    corrupted_header = bytearray(data)
    corrupted_header[40] ^= 0x10  # the record count: the header's checksum no longer holds
    cases = [
        (missing, ["cannot open: No such file or directory"]),
        (spoiled(tmp_path, "empty.ngc", b""), [", section header: ", "the file is empty"]),
        (spoiled(tmp_path, "text.ngc", b"x" * 400), [", section header: ", "not a corpus file"]),
        (spoiled(tmp_path, "header.ngc", bytes(corrupted_header)), [", section header: ", "checksum mismatch"]),
        (spoiled(tmp_path, "truncated.ngc", data[:-64]), [f"truncated: {len(data) - 64} bytes"]),
    ]
    target = SharedCorpus(1 << 16)
    target.append([9, 8, 7], stamp=5)
    for path, pieces in cases:
        with pytest.raises(CorpusFileError) as opened:
            MappedCorpus(path)
        message = str(opened.value)
        assert message.startswith(f"ngramspec_corpus_file_open: corpus file '{path}'"), message
        for piece in pieces:
            assert piece in message
        with pytest.raises(CorpusFileError, match="ngramspec_corpus_load: corpus file") as loaded:
            target.load(path)
        for piece in pieces:
            assert piece in str(loaded.value)
        assert (target.size, target.records, target.last_stamp) == (3, 1, 5)  # unchanged

    # A token flipped: it maps (only the header is checked); verify finds it.
    corrupted_tokens = bytearray(data)
    corrupted_tokens[tokens_offset + 5] ^= 0x01
    path = spoiled(tmp_path, "tokens.ngc", bytes(corrupted_tokens))
    with MappedCorpus(path) as mapped:
        with pytest.raises(CorpusFileError, match=f"ngramspec_corpus_file_verify: corpus file '{path}', "
                                                  "section tokens: "):
            mapped.verify()

    nowhere = tmp_path / "no-such-folder" / "c.ngc"
    with pytest.raises(CorpusFileError, match="ngramspec_corpus_save: corpus file .*cannot create"):
        target.save(nowhere)
    assert not nowhere.exists()


def test_bad_arguments_raise_type_and_value_errors(tmp_path: Path) -> None:
    path = good_file(tmp_path)
    with pytest.raises(TypeError, match="path must be a str, bytes or os.PathLike"):
        MappedCorpus(123)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="NUL"):
        MappedCorpus(str(path) + "\0x")
    corpus = SharedCorpus(1 << 16)
    with pytest.raises(TypeError):
        corpus.save(None)  # type: ignore[arg-type]
    with MappedCorpus(path) as mapped:
        with pytest.raises(ValueError, match="corpus_preference = 'newest' is invalid"):
            MatchDrafter(corpus_file=mapped, corpus_preference="newest")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="corpus_preference"):
            BatchSpeculator(max_sequences=1, corpus_file=mapped, corpus_preference=2)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="corpus_file must be a MappedCorpus"):
            MatchDrafter(corpus_file=corpus)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="corpus must be a SharedCorpus"):
            BatchSpeculator(max_sequences=1, corpus=mapped)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="room"):
            mapped.draft([1, 2], -1)
        with pytest.raises(ValueError, match="MatchConfig: index_capacity = 1 is invalid"):
            MatchDrafter(cap=1, corpus_file=mapped)
        assert mapped._users == 0  # the failed creates let go of it
    with pytest.raises(ValueError, match="closed"):
        MatchDrafter(corpus_file=mapped)
    with pytest.raises(ValueError, match="^ngramspec.MappedCorpus.verify: the MappedCorpus is closed$"):
        mapped.verify()
    with pytest.raises(ValueError, match="^ngramspec.MappedCorpus.draft: the MappedCorpus is closed$"):
        mapped.draft([1, 2])
    assert mapped.size == 0 and "closed" in repr(mapped)


def test_a_drafter_drafts_from_the_file_and_the_preference_chooses(tmp_path: Path) -> None:
    builder = SharedCorpus(1 << 16)
    builder.append([9, 5, 6, 50, 51])
    builder.save(tmp_path / "c.ngc")
    live = SharedCorpus(1 << 16)
    live.append([4, 5, 6, 60, 61])
    with MappedCorpus(tmp_path / "c.ngc") as mapped:
        def drafts(sequence: list[int], **kwargs: object) -> list[int]:
            with MatchDrafter(min_confidence=0, corpus_file=mapped, **kwargs) as drafter:  # type: ignore[arg-type]
                assert drafter.corpus_file is mapped
                drafter.update(sequence)
                return drafter.predict(2).tolist()

        assert drafts([7, 9, 5, 6]) == [50, 51]  # the file alone
        assert drafts([4, 5, 6], corpus=live) == [60, 61]  # the live corpus's match is longer
        assert drafts([4, 5, 6], corpus=live, corpus_preference="live") == [60, 61]
        assert drafts([4, 5, 6], corpus=live, corpus_preference="file") == [50, 51]
        assert drafts([9, 5, 6], corpus=live, corpus_preference="longer_match") == [50, 51]
        assert drafts([9, 5, 6], corpus=live, corpus_preference="live") == [60, 61]
        with MatchDrafter(min_confidence=0, corpus_preference="file") as plain:
            assert plain.corpus_file is None and plain.corpus_preference == "file"
            plain.update([7, 9, 5, 6])
            assert len(plain.predict(2)) == 0


CYCLE = [0, 1, 4, 6, 5, 2]  # the model's text: next = (3 * last + 1) mod 7


def next_of(token: int) -> int:
    return (3 * token + 1) % 7


def test_a_batch_drafts_from_the_file_and_finishes_into_the_live_corpus(tmp_path: Path) -> None:
    builder = SharedCorpus(1 << 16)
    builder.append((CYCLE * 6)[:31])
    builder.save(tmp_path / "c.ngc")
    live = SharedCorpus(1 << 16)
    with MappedCorpus(tmp_path / "c.ngc") as mapped:
        prompt = [3, 0, 1]  # then the prefill's 4: nothing of its own to copy; the file has 6 5 2 0
        expected = []  # plain greedy decoding after the prompt
        last = prompt[-1]
        for _ in range(20):
            last = next_of(last)
            expected.append(last)
        accepted = {}
        for with_file in (False, True):
            spec = BatchSpeculator(max_sequences=2, cost="knee:16", drafter={"min_confidence": 0, "index_capacity": 64},
                                   corpus=live, corpus_file=mapped if with_file else None,
                                   corpus_preference="file")
            assert spec.corpus is live and spec.corpus_file is (mapped if with_file else None)
            spec.begin(42, prompt, max_new_tokens=20)
            output: list[int] = []
            for pass_index in range(40):
                drafts, offsets = spec.propose([42])
                if pass_index == 1 and with_file:
                    assert drafts.tolist() == [6, 5, 2, 0]
                last = output[-1] if output else prompt[-1]
                answers = [next_of(t) for t in [last, *drafts.tolist()]]
                steps = spec.accept([42], answers, [0, len(answers)])
                output += answers[: steps["emitted"][0]]
                if steps["finished"][0]:
                    break
            assert output == expected  # plain greedy decoding
            accepted[with_file] = spec.stats.accepted
            records = live.records
            spec.finish(42)
            assert live.records == records + 1  # the output goes to the live corpus
            spec.close()
        assert accepted[True] > accepted[False]  # the file's continuation is accepted
        assert mapped.records == 1  # read-only
        mapped.verify()


def test_drafters_and_batches_keep_the_file_mapped_past_close(tmp_path: Path) -> None:
    builder = SharedCorpus(1 << 16)
    builder.append(list(range(100, 164)))
    builder.save(tmp_path / "c.ngc")
    mapped = MappedCorpus(tmp_path / "c.ngc")
    drafter = MatchDrafter(corpus_file=mapped)
    batch = BatchSpeculator(max_sequences=2, corpus_file=mapped)
    mapped.close()  # the mapping stays until the drafter and the batch are done with it
    assert mapped._native is not None
    # Its own calls are over.
    with pytest.raises(ValueError, match="^ngramspec.MappedCorpus.draft: the MappedCorpus is closed$"):
        mapped.draft([100, 101])
    drafter.update([7, 100, 101, 102])
    assert drafter.predict(4).tolist() == [103, 104, 105, 106]  # copied from the file
    del drafter
    gc.collect()
    assert mapped._native is not None
    batch.close()
    assert mapped._native is None


def test_a_new_file_saved_over_the_path_leaves_the_mapping_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "c.ngc"
    corpus = SharedCorpus(1 << 16)
    corpus.append([1, 2, 3])
    corpus.save(path)
    with MappedCorpus(path) as mapped:
        corpus.append([4, 5, 6])
        corpus.save(path)  # a rename over the old file
        assert mapped.size == 3
        mapped.verify()
        with MappedCorpus(path) as again:
            assert again.size == 6


def test_load_refuses_a_damaged_body_so_save_cannot_launder_it(tmp_path: Path) -> None:
    rng = random.Random(1128)
    data = good_file(tmp_path).read_bytes()
    sections = [struct.unpack_from("<QQ", data, SECTIONS_AT + 40 * i + 8) for i in range(6)]  # offset, bytes
    for trial in range(10):
        damaged = bytearray(data)
        for _ in range((len(data) - HEADER_BYTES) // 10):  # random bytes over a tenth of the body
            damaged[rng.randrange(HEADER_BYTES, len(data))] = rng.randrange(256)
        if all(damaged[o:o + n] == data[o:o + n] for o, n in sections):
            continue  # only the gaps between sections changed: nothing reads them
        path = spoiled(tmp_path, f"damaged{trial}.ngc", bytes(damaged))
        corpus = SharedCorpus(1 << 16)
        corpus.append([9, 8, 7], stamp=5)
        with pytest.raises(CorpusFileError, match=f"ngramspec_corpus_load: corpus file '{path}', section "
                                                  "[a-z0-9]+: checksum mismatch"):
            corpus.load(path)
        assert (corpus.size, corpus.records, corpus.last_stamp) == (3, 1, 5)  # unchanged
        with MappedCorpus(path) as mapped:
            with pytest.raises(CorpusFileError, match="ngramspec_corpus_file_verify_checksums: .*checksum mismatch"):
                mapped.verify_checksums()
        corpus.save(tmp_path / "saved.ngc")  # what it holds: none of the damage
        with MappedCorpus(tmp_path / "saved.ngc") as saved:
            saved.verify()
            assert saved.size == 3

    # Trusted, the checksums are skipped: a flipped token loads.
    tokens_offset = sections[0][0]
    flipped = bytearray(data)
    flipped[tokens_offset] ^= 0x01
    path = spoiled(tmp_path, "flipped.ngc", bytes(flipped))
    corpus = SharedCorpus(1 << 16)
    with pytest.raises(CorpusFileError, match="section tokens: checksum mismatch"):
        corpus.load(path)
    corpus.load(path, verify_checksums=False)
    assert corpus.records == 8
    with pytest.raises(TypeError, match="verify_checksums must be a bool"):
        corpus.load(path, verify_checksums=1)  # type: ignore[arg-type]


def test_both_loads_refuse_a_record_table_verify_refuses_under_checksums_made_to_match(tmp_path: Path) -> None:
    corpus = SharedCorpus(1 << 16)
    for i in range(20):
        corpus.append([(3 * i + j) % 11 for j in range(3 + i % 5)])
    path = tmp_path / "c.ngc"
    corpus.save(path)
    forged = bytearray(path.read_bytes())
    records_offset, records_bytes = struct.unpack_from("<QQ", forged, SECTIONS_AT + 40 * 2 + 8)
    struct.pack_into("<Q", forged, records_offset + 16 * 10, 10**12)  # record 10 starts far past the tokens
    struct.pack_into("<Q", forged, SECTIONS_AT + 40 * 2 + 24, checksum(bytes(forged[records_offset:][:records_bytes])))
    struct.pack_into("<Q", forged, HEADER_CHECKSUM_AT, checksum(bytes(forged[:HEADER_CHECKSUM_AT])))
    path = spoiled(tmp_path, "forged.ngc", bytes(forged))
    problem = (f"corpus file '{path}', section records: record 10 starts at token 1000000000000, not at a start bit "
               "after the previous record's start")
    with MappedCorpus(path) as mapped:
        mapped.verify_checksums()  # the checksums hold
        with pytest.raises(CorpusFileError) as verify_error:
            mapped.verify()
        assert str(verify_error.value) == f"ngramspec_corpus_file_verify: {problem}"
    target = SharedCorpus(1 << 16)
    target.append([9, 8, 7], stamp=5)
    for verify_checksums, function in ((True, "ngramspec_corpus_load"), (False, "ngramspec_corpus_load_trusted")):
        with pytest.raises(CorpusFileError) as load_error:
            target.load(path, verify_checksums=verify_checksums)
        assert str(load_error.value) == f"{function}: {problem}"
        assert (target.size, target.records, target.last_stamp) == (3, 1, 5)  # unchanged


def test_drafters_and_batches_refuse_another_vocabulary_and_drop_foreign_drafts(tmp_path: Path) -> None:
    builder = SharedCorpus(1 << 16)
    builder.append([100, 101, 102, 103, 5000, 104])  # 5000: outside a vocabulary of 1000
    builder.save(tmp_path / "unknown.ngc")
    other = spoiled(tmp_path, "32000.ngc", with_vocabulary((tmp_path / "unknown.ngc").read_bytes(), 32000, 0xABC))
    with MappedCorpus(other) as mapped:
        assert (mapped.vocab_size, mapped.tokenizer_fingerprint) == (32000, 0xABC)
        mapped.verify_checksums()
        refused = f"corpus file '{other}', section header: its tokens come from a vocabulary of 32000 tokens, " \
                  "the model's has 512"
        with pytest.raises(CorpusFileError, match="ngramspec_match_drafter_create_vocab: " + refused):
            MatchDrafter(corpus_file=mapped, vocab_size=512)
        with pytest.raises(CorpusFileError, match="ngramspec_batch_create_vocab: " + refused):
            BatchSpeculator(max_sequences=1, corpus_file=mapped, vocab_size=512)
        with pytest.raises(CorpusFileError, match="ngramspec_batch_create_tree_file: " + refused):
            BatchSpeculator(max_sequences=1, corpus_file=mapped, vocab_size=512, tree=True)
        with pytest.raises(CorpusFileError, match="tokenizer fingerprint 0x0000000000000abc, the model's is "
                                                  "0x0000000000000abd"):
            MatchDrafter(corpus_file=mapped, tokenizer_fingerprint=0xABD)
        with pytest.raises(ValueError, match="vocab_size = -1 is invalid"):
            MatchDrafter(corpus_file=mapped, vocab_size=-1)
        assert mapped._users == 0  # the failed creates let go of it
        MatchDrafter(corpus_file=mapped, vocab_size=32000, tokenizer_fingerprint=0xABC).close()

    with MappedCorpus(tmp_path / "unknown.ngc") as mapped:
        assert (mapped.vocab_size, mapped.tokenizer_fingerprint) == (0, 0)
        with MatchDrafter(corpus_file=mapped, min_confidence=0, vocab_size=1000) as drafter:
            drafter.update([7, 100, 101, 102])
            assert drafter.predict(8).tolist() == [103]  # cut before 5000
            assert drafter.out_of_vocabulary == 2
        # A tree batch reads the corpus file too; both drop what lies outside the vocabulary.
        for tree in (False, True):
            for vocab in (0, 1000):
                spec = BatchSpeculator(max_sequences=1, drafter={"min_confidence": 0}, corpus_file=mapped,
                                       vocab_size=vocab, tree=tree)
                spec.begin(9, [7, 100, 101], max_new_tokens=16, max_drafts=8)
                if tree:
                    spec.propose_trees([9])  # the prefill
                    spec.accept_trees([9], [102], [0, 1])
                    tokens, parents, _ = spec.propose_trees([9])
                    assert parents[0] == -1
                else:
                    spec.propose([9])
                    spec.accept([9], [102], [0, 1])
                    tokens, _ = spec.propose([9])
                assert tokens[0] == 103  # the file's continuation
                assert bool((tokens >= 1000).any()) == (vocab == 0)
                assert spec.stats.out_of_vocabulary == (2 if vocab else 0)
                spec.close()
