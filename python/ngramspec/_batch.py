"""BatchSpeculator: speculation for every running sequence of an engine."""

from __future__ import annotations

import ctypes
import enum
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import numpy as np
import numpy.typing as npt

from ._closable import Closable
from ._arrays import (IdsLike, OffsetsLike, Remembered, TokensLike, float32_arg, ids_arg, ids_arg_remembered,
                      offsets_arg_remembered, out_offsets, out_tokens, size_arg, tokens_arg, tokens_arg_remembered)
from ._corpus import CorpusPreferenceName, MappedCorpus, SharedCorpus, create_attached, preference_arg
from ._drafters import match_config
from ._planner import LearnedCostStats, learned_stats, read_text
from ._errors import raise_status
from ._native import BatchStats as _CBatchStats
from ._native import SequenceOptions, Step, lib
from ._native import TreeConfig as _CTreeConfig

__all__ = ["BatchSpeculator", "BatchStats", "StopReason", "STEP_DTYPE"]


class StopReason(enum.IntEnum):
    """Why a sequence finished (``ngramspec_stop_reason``)."""

    MAX_NEW_TOKENS = 0  #: it emitted max_new_tokens tokens
    TOKEN = 1  #: it emitted one of its stop tokens (the stop token is emitted)
    MAX_CONTEXT = 2  #: prompt + output reached max_context


#: The dtype of :meth:`BatchSpeculator.accept`'s result: one record per sequence, laid out as the
#: C struct ``ngramspec_step`` (so the library writes it directly).
STEP_DTYPE = np.dtype({
    "names": ["emitted", "accepted", "rollback_to", "discarded", "finished", "stop_reason"],
    "formats": [np.uintp, np.uintp, np.uintp, np.uintp, np.int32, np.int32],
    "offsets": [getattr(Step, name).offset for name in
                ("emitted", "accepted", "rollback_to", "discarded", "finished", "stop_reason")],
    "itemsize": ctypes.sizeof(Step),
})


@dataclass(frozen=True)
class BatchStats:
    """Running totals of a :class:`BatchSpeculator` (``ngramspec_batch_stats``; experimental in the C ABI)."""

    proposals: int  #: propose calls
    drafted: int  #: drafts verified (those the model tokens of accept covered)
    accepted: int  #: drafts accepted and emitted
    emitted: int  #: tokens emitted
    #: draft tokens the drafters dropped for lying outside `vocab_size` (each such token and every one
    #: after it in its draft)
    out_of_vocabulary: int = 0

    @property
    def acceptance_rate(self) -> float:
        """accepted / drafted (0 when nothing was drafted)."""
        return self.accepted / self.drafted if self.drafted else 0.0


_MAX_DRAFTS_PER_PASS = 1024  # kMaxDraftsPerPass: begin rejects more


class BatchSpeculator(Closable):
    """Speculation for every running sequence of an engine (``ngramspec_batch``): the one object an
    engine holds for its whole batch.

    The engine names sequences by ids of its own (request ids, slot indices: any 64-bit ints) and
    drives them in steps around its batched forward::

        spec.begin(seq_id, prompt, max_new_tokens=256)        # its drafter reads the prompt
        loop:
            drafts, offsets = spec.propose(ids)               # ids: the sequences of this pass
            forward, per sequence i: [its last token, drafts[offsets[i]:offsets[i + 1]]]
                     (a sequence with no output yet: its prompt, the prefill)
            steps = spec.accept(ids, model_tokens, model_offsets)
            per sequence i: emit model_tokens[model_offsets[i]:][:steps["emitted"][i]],
                            roll its KV cache back to steps["rollback_to"][i] when steps["discarded"][i],
                            and spec.finish(ids[i]) once steps["finished"][i]

    For a greedy model the emitted tokens are exactly plain greedy decoding's, whatever the drafts.

    Buffers: :meth:`propose` and :meth:`accept` return views of arrays this object keeps and
    reuses; each call overwrites what the previous call of the same method returned (``.copy()``
    what must outlive it). :meth:`propose_into` writes into the caller's arrays instead.

    Inputs: ids as a list of ints or a uint64/int64 array; tokens as a list of ints or an integer
    array. C-contiguous uint32/int32 token arrays, uint64/int64 id arrays and uintp/int64 offset
    arrays are passed to the library in place; anything else is converted (copied) first.

    Errors: a bad argument (an unknown or finished id, offsets that disagree with the tokens, a full
    pool) raises ``ValueError`` with the library's message, and nothing changes.

    Trees (experimental in the C ABI): ``BatchSpeculator(tree=True)`` (or a dict of tree settings)
    pools TreeDrafters, which draft several candidate continuations a sequence for a model that
    verifies a tree in one pass (each token attending only to the cached sequence and its
    ancestors)::

        tokens, parents, offsets = spec.propose_trees(ids)
        forward, per sequence i: a tree pass at its cache length: entry 0 its last token (the root),
                 entry 1 + j its node j, tokens[offsets[i] + j], under entry parents[offsets[i] + j] + 1
                 (0, the root, for -1); the model's token after every entry, and, when spec.top_k,
                 its top spec.top_k tokens after every entry (rows of `top`)
        steps, kept = spec.accept_trees(ids, model_tokens, model_offsets, top)
        per sequence i, e = model_offsets[i], path = kept[e:e + steps["emitted"][i]]:
                 emit model_tokens[e + path]; keep its KV entries `path` at cache length + j (when
                 path is 0, 1, ...: roll back to steps["rollback_to"][i] when steps["discarded"][i])

    The chain calls (:meth:`propose`, :meth:`accept`) step a tree batch too, with the drafters'
    spines.

    Threads: drive one speculator from one thread at a time; each native call releases the GIL.
    """

    _handle: int | None = None
    _corpus: SharedCorpus | None = None
    _corpus_file: MappedCorpus | None = None

    def __init__(self, *, max_sequences: int = 64, max_pass_tokens: int = 0, max_record_tokens: int = 8192,
                 cost: str | None = None, drafter: Mapping[str, Any] | None = None,
                 corpus: SharedCorpus | None = None, corpus_file: MappedCorpus | None = None,
                 corpus_preference: CorpusPreferenceName = "longer_match",
                 tree: bool | Mapping[str, Any] = False, vocab_size: int = 0,
                 tokenizer_fingerprint: int = 0) -> None:
        """A speculator with a pool of `max_sequences` MatchDrafters, made now (memory is fixed).

        `max_pass_tokens`: the most tokens one verify pass carries (0: no limit).
        `max_sequences`: sequences running at once, 1 to 2**20.
        `max_record_tokens`: output tokens of a sequence kept for the corpus (up to 2**28).
        `cost`: what a verify pass costs, ``"flat"``, ``"knee:N"`` or ``"table:T=C,..."`` (the
        grammar of the C++ VerifyCost::parse; only ratios matter, and a cost more than 1e200 times
        the one-token pass's is refused); propose then sizes
        every draft so that the pass's expected tokens per unit of cost is highest. ``"learn"`` or
        ``"learn:SPEC"`` (the recommended setting): the cost is learned from the passes served, SPEC
        (a curve measured at start, :meth:`VerifyCost.measure`'s spec say) its prior; each pass is
        timed from the end of propose to the start of accept, or reported by
        :meth:`report_pass_seconds`. None: every sequence sends what its drafter proposes, up to its
        max_drafts.
        `drafter`: MatchDrafter keyword settings for the pool (those left out take MatchDrafter's
        defaults, the gate included); None: MatchDrafter's defaults, without the gate when there is
        a cost.
        `corpus`: a SharedCorpus that :meth:`finish` appends outputs to and the drafters consult.
        `corpus_file`: a MappedCorpus the drafters also consult (read-only: finished outputs go to
        `corpus` alone); `corpus_preference` chooses when both match: ``"longer_match"`` (the longer
        match; the live corpus on a tie), ``"live"`` or ``"file"``.
        `tree`: True, or a dict of tree settings, pools TreeDrafters whose spine is `drafter` (see
        :meth:`propose_trees`): ``successor_slots`` (a power of two, default 4096),
        ``max_children`` (1..16, default 8), ``vocab_size`` (the model's vocabulary, to recycle its
        top-k, up to 2**24; 0, the default: none), ``top_k`` (1..32, default 8), ``shared_top_k`` (default
        True: one table that every drafter shares), ``carry_over`` and ``enrich_counts`` (default
        False; TreeConfig's settings of those names), ``draw_recycled`` (default False: the recycled
        top-k candidates are drawn from the probabilities :meth:`accept_trees` records with
        `top_probabilities`, for an engine that verifies by rejection sampling; the tables then keep
        probabilities), ``draw_seed`` (the draws' seed, default 0) and ``recycled_history`` (with
        ``draw_recycled``: what a row keeps of the distributions recorded before, default 0.6). A tree
        batch reads `corpus_file` too (its drafters' spine drafts from it).
        `vocab_size`: the model's vocabulary (0, the default: unknown; for a tree batch, the tree's
        ``vocab_size`` then, which may not disagree); the drafters cut drafts at their first token
        not below it and count the tokens cut (:attr:`BatchStats.out_of_vocabulary`), and a
        `corpus_file` that records another vocabulary size is refused. `tokenizer_fingerprint` (0,
        the default: unset): a number naming the tokenizer; a `corpus_file` that records another is
        refused.
        Raises ValueError (the library's message) for an invalid setting or cost,
        :class:`CorpusFileError` naming the file and both values for a file of another vocabulary."""
        config = lib.ngramspec_batch_config_default()
        config.max_sequences = size_arg(max_sequences, "max_sequences")
        config.max_pass_tokens = size_arg(max_pass_tokens, "max_pass_tokens")
        config.max_record_tokens = size_arg(max_record_tokens, "max_record_tokens")
        if cost is not None:
            if not isinstance(cost, str):
                raise TypeError(f"cost must be a str such as 'knee:256', or None; not {type(cost).__name__}")
            config.cost = cost.encode("utf-8")  # kept alive by `config` during the call; the library copies it
        if drafter is not None:
            if not isinstance(drafter, Mapping):
                raise TypeError(f"drafter must be a dict of MatchDrafter settings or None, not "
                                f"{type(drafter).__name__}")
            config.default_drafter = 0
            config.drafter = match_config(**drafter)
        preference = preference_arg(corpus_preference)
        vocab = size_arg(vocab_size, "vocab_size")
        fingerprint = size_arg(tokenizer_fingerprint, "tokenizer_fingerprint")
        tree_config = _tree_config(tree)
        if tree_config is None:
            handle = create_attached(corpus, corpus_file, lambda native_corpus, native_file, out:
                                     lib.ngramspec_batch_create_vocab(ctypes.byref(config), native_corpus, native_file,
                                                                      preference, vocab, fingerprint,
                                                                      ctypes.byref(out)))
        else:
            handle = create_attached(corpus, corpus_file, lambda native_corpus, native_file, out:
                                     lib.ngramspec_batch_create_tree_file(ctypes.byref(config),
                                                                          ctypes.byref(tree_config), native_corpus,
                                                                          native_file, preference, vocab, fingerprint,
                                                                          ctypes.byref(out)))
        self._tree = tree_config is not None
        self._corpus = corpus
        self._corpus_file = corpus_file
        self._corpus_preference = corpus_preference
        self._cost = cost
        self._max_sequences = config.max_sequences
        self._handle = handle
        self._max_drafts = 4  # the largest max_drafts of any sequence begun: sizes the drafts buffer
        self._count = ctypes.c_size_t(0)
        self._count_address = ctypes.addressof(self._count)
        # Reused output buffers, and their addresses (asking NumPy for one costs more than the call).
        self._drafts = np.empty(256, np.uint32)
        self._offsets = np.empty(65, np.uintp)
        self._steps = np.empty(64, STEP_DTYPE)
        self._drafts_address = self._drafts.ctypes.data
        self._offsets_address = self._offsets.ctypes.data
        self._steps_address = self._steps.ctypes.data
        # The last ids, model tokens and offsets arrays passed, with their addresses.
        self._last_ids = Remembered()
        self._last_tokens = Remembered()
        self._last_offsets = Remembered()
        self._options = lib.ngramspec_sequence_options_default()
        # The hot calls, bound once.
        self._propose_c = lib.ngramspec_batch_propose
        self._accept_c = lib.ngramspec_batch_accept
        # Tree passes' buffers: nodes' parents, and the entries kept.
        self._parents = np.empty(256, np.int32)
        self._kept = np.empty(256, np.uintp)
        # propose_trees(with_q=True)'s: each node's q offsets, and the supports' tokens and probabilities.
        self._q_offsets = np.empty(257, np.uintp)
        self._q_tokens = np.empty(0, np.uint32)
        self._q_probabilities = np.empty(0, np.float32)
        self._n_q = ctypes.c_size_t(0)

    # ---- Sequences -------------------------------------------------------------------------

    def begin(self, seq_id: int, prompt: TokensLike, *, max_new_tokens: int = 128,
              stop_tokens: Iterable[int] | None = (), max_context: int = 0, speculate: bool = True,
              max_drafts: int = 4) -> None:
        """Starts sequence `seq_id` after `prompt`; its drafter reads the prompt.

        `max_new_tokens`: the most tokens it emits; `stop_tokens`: it finishes after emitting any
        of these (None or empty: none); `max_context`: the most tokens of prompt + output (0: no
        limit); `speculate`: False drafts nothing for it; `max_drafts`: the most drafts it sends in
        one pass (up to 1024). `stop_tokens` that is neither None nor iterable raises TypeError
        naming it.
        Raises ValueError (the library's message) when the id is running, every pooled drafter is
        taken, or the prompt is empty or longer than max_context. A sequence that may emit nothing
        (max_new_tokens 0) starts finished."""
        handle = self._live("begin")
        prompt_array, prompt_pointer, prompt_length = tokens_arg(prompt, "prompt")
        if stop_tokens is None:
            stop_tokens = ()
        elif not isinstance(stop_tokens, np.ndarray):
            try:
                stop_tokens = list(stop_tokens)
            except TypeError:
                raise TypeError(f"stop_tokens must be an iterable of token ids or None, not "
                                f"{type(stop_tokens).__name__} ({stop_tokens!r})") from None
        stops, stop_pointer, n_stops = tokens_arg(stop_tokens, "stop_tokens")
        options = self._options
        options.max_new_tokens = size_arg(max_new_tokens, "max_new_tokens")
        options.stop_tokens = stop_pointer if n_stops else None
        options.n_stop_tokens = n_stops
        options.max_context = size_arg(max_context, "max_context")
        options.speculate = 1 if speculate else 0
        options.max_drafts = size_arg(max_drafts, "max_drafts")
        status = lib.ngramspec_batch_begin(handle, _id(seq_id), prompt_pointer, prompt_length,
                                           ctypes.byref(options))
        if status:
            raise_status(status)
        if speculate and options.max_drafts > self._max_drafts:
            self._max_drafts = min(options.max_drafts, _MAX_DRAFTS_PER_PASS)

    def finish(self, seq_id: int) -> None:
        """Ends sequence `seq_id`, finished or not: appends its output to the corpus, when there is
        one, and returns its drafter to the pool. ValueError for an id that is not running."""
        status = lib.ngramspec_batch_finish(self._live("finish"), _id(seq_id))
        if status:
            raise_status(status)

    def cancel(self, seq_id: int) -> None:
        """Ends sequence `seq_id` without adding it to the corpus. ValueError for an id that is not running."""
        status = lib.ngramspec_batch_cancel(self._live("cancel"), _id(seq_id))
        if status:
            raise_status(status)

    def __contains__(self, seq_id: object) -> bool:
        """Whether `seq_id` is running (begun and neither finished nor cancelled)."""
        if isinstance(seq_id, bool) or not isinstance(seq_id, (int, np.integer)) or not 0 <= seq_id < 1 << 64:
            return False
        return bool(lib.ngramspec_batch_contains(self._handle, int(seq_id)))

    def __len__(self) -> int:
        """Sequences running."""
        return int(lib.ngramspec_batch_size(self._handle))

    # ---- Steps -----------------------------------------------------------------------------

    def propose(self, ids: IdsLike, *, extra_tokens: int = 0) -> tuple[npt.NDArray[np.uint32],
                                                                         npt.NDArray[np.uintp]]:
        """Drafts for the next verify pass of the sequences `ids`, in that order.

        Returns ``(drafts, offsets)``: sequence ``ids[i]``'s drafts are
        ``drafts[offsets[i]:offsets[i + 1]]``; ``len(offsets) == len(ids) + 1`` and
        ``len(drafts) == offsets[-1]``. A sequence with no output yet drafts nothing (the pass
        prefills its prompt). `extra_tokens`: what else the pass carries (other prefills), for the
        cost. Both arrays are views of buffers this object reuses: the next propose overwrites them.
        Raises ValueError (the library's message) for an id that is unknown, finished or listed twice."""
        ids_array, ids_pointer, n = ids_arg_remembered(ids, self._last_ids)
        if extra_tokens:
            extra_tokens = size_arg(extra_tokens, "extra_tokens")
        drafts = self._drafts
        if drafts.shape[0] < n * self._max_drafts:
            drafts = self._drafts = np.empty(max(n * self._max_drafts, 2 * drafts.shape[0]), np.uint32)
            self._drafts_address = drafts.ctypes.data
        offsets = self._offsets
        if offsets.shape[0] < n + 1:
            offsets = self._offsets = np.empty(max(n + 1, 2 * offsets.shape[0]), np.uintp)
            self._offsets_address = offsets.ctypes.data
        status = self._propose_c(self._live("propose"), ids_pointer, n, self._drafts_address, drafts.shape[0],
                                 self._offsets_address, extra_tokens, self._count_address)
        if status:
            raise_status(status)
        return drafts[: self._count.value], offsets[: n + 1]

    def propose_into(self, ids: IdsLike, drafts: npt.NDArray[Any], offsets: npt.NDArray[Any], *,
                     extra_tokens: int = 0) -> int:
        """:meth:`propose` into the caller's arrays: `drafts` (uint32 or int32; its size caps the
        pass's drafts) and `offsets` (uintp/uint64 or int64, exactly ``len(ids) + 1`` elements), both
        C-contiguous and writable. Returns the number of drafts written."""
        ids_array, ids_pointer, n = ids_arg(ids)
        drafts = out_tokens(drafts, "drafts")
        offsets = out_offsets(offsets, "offsets")
        if offsets.size != n + 1:
            raise ValueError(f"offsets has {offsets.size} elements; it needs len(ids) + 1 = {n + 1}")
        status = self._propose_c(self._live("propose_into"), ids_pointer, n, drafts.ctypes.data, drafts.size,
                                 offsets.ctypes.data, size_arg(extra_tokens, "extra_tokens"), self._count_address)
        if status:
            raise_status(status)
        return self._count.value

    def accept(self, ids: IdsLike, model_tokens: TokensLike, offsets: OffsetsLike) -> np.ndarray:
        """Decides the pass for the sequences `ids`: ``model_tokens[offsets[i]:offsets[i + 1]]`` are
        the model's tokens after each token fed for ``ids[i]`` (its last token and drafts: one more
        than the drafts verified; one for a sequence's prefill). Feeds the emitted tokens to the
        drafters.

        Returns one record per sequence (dtype :data:`STEP_DTYPE`): ``emitted`` (emit the first
        ``emitted`` of its model tokens), ``accepted`` (drafts accepted), ``rollback_to`` and
        ``discarded`` (roll its KV cache back to ``rollback_to`` when ``discarded`` > 0),
        ``finished`` (nonzero: finish or cancel it) and ``stop_reason`` (a :class:`StopReason`,
        when finished). The array is a view of a buffer this object reuses: the next accept
        overwrites it. Raises ValueError (the library's message), changing nothing, for bad offsets
        or an unknown, finished or repeated id."""
        ids_array, ids_pointer, n = ids_arg_remembered(ids, self._last_ids)
        tokens_array, tokens_pointer, n_tokens = tokens_arg_remembered(model_tokens, self._last_tokens, "model_tokens")
        offsets_array, offsets_pointer = offsets_arg_remembered(offsets, n + 1, self._last_offsets)
        steps = self._steps
        if steps.shape[0] < n:
            steps = self._steps = np.empty(max(n, 2 * steps.shape[0]), STEP_DTYPE)
            self._steps_address = steps.ctypes.data
        status = self._accept_c(self._live("accept"), ids_pointer, n, tokens_pointer, n_tokens, offsets_pointer,
                                self._steps_address)
        if status:
            raise_status(status)
        return steps[:n]

    # ---- Tree passes -----------------------------------------------------------------------

    def propose_trees(self, ids: IdsLike, *, extra_tokens: int = 0, with_q: bool = False) -> tuple[Any, ...]:
        """Trees for the next verify pass of the sequences `ids` (a tree batch only).

        Returns ``(tokens, parents, offsets)``: sequence ``ids[i]``'s nodes are
        ``tokens[offsets[i]:offsets[i + 1]]``, best first, and their parents the same range of
        `parents`, local to the sequence: -1 for a child of the root (the sequence's last token),
        else the index of an earlier node of its range. At most its max_drafts nodes, fewer as its
        max_context fills (a tree pass writes a KV entry per node, so a tree has no more nodes than
        the longest chain there); none for a sequence with no output yet (its prefill).

        `with_q` (default False): also what each node was drawn from, for an engine that verifies
        by rejection sampling (``tree={"draw_recycled": True, ...}``): returns ``(tokens, parents,
        offsets, q_offsets, q_tokens, q_probabilities)``, node n of the call (flat, as `tokens`)
        drawn from the support ``q_tokens[q_offsets[n]:q_offsets[n + 1]]`` (uint32) with the
        probabilities at the same indices of `q_probabilities` (float32), an empty support for a
        chosen node (q one-hot on it): :meth:`TokenSampler.verify_chain`'s layout, whose
        :meth:`TokenSampler.verify_tree` takes sequence i's part as it is
        (``q_offsets=q_offsets[offsets[i]:offsets[i + 1] + 1]``). When any node of the pass was
        drawn, each tree is cut by its drafter's estimates alone.

        The arrays are views of buffers this object reuses. Raises ValueError (the library's
        message) for a chain batch or an id that is unknown, finished or listed twice."""
        ids_array, ids_pointer, n = ids_arg_remembered(ids, self._last_ids)
        if extra_tokens:
            extra_tokens = size_arg(extra_tokens, "extra_tokens")
        capacity = n * self._max_drafts
        if self._drafts.shape[0] < capacity:
            self._drafts = np.empty(max(capacity, 2 * self._drafts.shape[0]), np.uint32)
            self._drafts_address = self._drafts.ctypes.data
        if self._parents.shape[0] < self._drafts.shape[0]:
            self._parents = np.empty(self._drafts.shape[0], np.int32)
        if self._offsets.shape[0] < n + 1:
            self._offsets = np.empty(max(n + 1, 2 * self._offsets.shape[0]), np.uintp)
            self._offsets_address = self._offsets.ctypes.data
        tokens, parents, offsets = self._drafts, self._parents, self._offsets
        if not with_q:
            status = lib.ngramspec_batch_propose_trees(self._live("propose_trees"), ids_pointer, n,
                                                       self._drafts_address, parents.ctypes.data, tokens.shape[0],
                                                       self._offsets_address, extra_tokens, self._count_address)
            if status:
                raise_status(status)
            count = self._count.value
            return tokens[:count], parents[:count], offsets[: n + 1]
        if self._q_offsets.shape[0] < tokens.shape[0] + 1:
            self._q_offsets = np.empty(tokens.shape[0] + 1, np.uintp)
        q_capacity = tokens.shape[0] * max(1, self.top_k)  # a drawn node's support: the rest of a top-k row
        if self._q_tokens.shape[0] < q_capacity:
            self._q_tokens = np.empty(q_capacity, np.uint32)
            self._q_probabilities = np.empty(q_capacity, np.float32)
        q_offsets, q_tokens, q_probabilities = self._q_offsets, self._q_tokens, self._q_probabilities
        status = lib.ngramspec_batch_propose_trees_q(self._live("propose_trees"), ids_pointer, n, self._drafts_address,
                                                     parents.ctypes.data, tokens.shape[0], self._offsets_address,
                                                     extra_tokens, self._count_address, q_offsets.ctypes.data,
                                                     q_tokens.ctypes.data, q_probabilities.ctypes.data,
                                                     q_tokens.shape[0], ctypes.byref(self._n_q))
        if status:
            raise_status(status)
        count = self._count.value
        n_q = self._n_q.value
        return (tokens[:count], parents[:count], offsets[: n + 1], q_offsets[: count + 1], q_tokens[:n_q],
                q_probabilities[:n_q])

    def accept_trees(self, ids: IdsLike, model_tokens: TokensLike, offsets: OffsetsLike,
                     top: TokensLike | None = None, *,
                     top_probabilities: npt.ArrayLike | None = None) -> tuple[np.ndarray, npt.NDArray[np.uintp]]:
        """Decides the tree pass for the sequences `ids`: ``model_tokens[offsets[i]:offsets[i + 1]]``
        are the model's tokens after each entry fed for ``ids[i]`` (its root, then its nodes as
        :meth:`propose_trees` gave them: one more than the nodes verified; one for a prefill).
        `top`: None, or the model's :attr:`top_k` best tokens after every entry, flat
        (``len(model_tokens) * top_k`` tokens, row e for model_tokens[e]), which the drafters
        recycle. Tells the drafters how the pass went and feeds them the emitted tokens.
        `top_probabilities` (default None; needs `top`, and ``draw_recycled`` at construction): the
        probability of each token of `top` under the distribution the engine sampled that entry's
        token from (after temperature and filters; a row with fewer tokens left ends in 0), float32,
        recorded into the drafters' tables so that their drawn candidates are drawn from it.

        Returns ``(steps, kept)``: steps as :meth:`accept`'s, and the pass entries each sequence
        keeps, ``kept[offsets[i]:offsets[i] + steps["emitted"][i]]``: it emits
        ``model_tokens[offsets[i] + kept[...]]``, and its KV entry ``kept[offsets[i] + j]`` goes to
        position cache length + j. Both are views of buffers this object reuses. Raises ValueError
        (the library's message), changing nothing, for bad offsets or sizes, a top-k token outside
        the table's vocabulary or listed twice in its row, or an unknown, finished or repeated id, and
        for `top_probabilities`
        of another length than `top`, a probability outside [0, 1], a row whose first probability is
        0, or a batch made without ``draw_recycled``."""
        ids_array, ids_pointer, n = ids_arg_remembered(ids, self._last_ids)
        tokens_array, tokens_pointer, n_tokens = tokens_arg_remembered(model_tokens, self._last_tokens, "model_tokens")
        offsets_array, offsets_pointer = offsets_arg_remembered(offsets, n + 1, self._last_offsets)
        if top is None:
            top_array, top_pointer, n_top = None, None, 0
        else:
            top_array, top_pointer, n_top = tokens_arg(top, "top")
        if top_probabilities is not None:
            if top is None:
                raise ValueError("top_probabilities needs top: the probabilities are those of top's tokens")
            probabilities = np.ascontiguousarray(top_probabilities, dtype=np.float32)
            if probabilities.ndim != 1:  # flat as top is: rows of another shape would be read out of order
                raise ValueError(f"top_probabilities must be one-dimensional, as top is; it has shape "
                                 f"{probabilities.shape}")
            if probabilities.shape[0] != n_top:
                raise ValueError(f"top_probabilities has {probabilities.shape[0]} values; it needs one per token of "
                                 f"top, {n_top}")
        steps = self._steps
        if steps.shape[0] < n:
            steps = self._steps = np.empty(max(n, 2 * steps.shape[0]), STEP_DTYPE)
            self._steps_address = steps.ctypes.data
        kept = self._kept
        if kept.shape[0] < n_tokens:
            kept = self._kept = np.empty(max(n_tokens, 2 * kept.shape[0]), np.uintp)
        if top_probabilities is None:
            status = lib.ngramspec_batch_accept_trees(self._live("accept_trees"), ids_pointer, n, tokens_pointer,
                                                      n_tokens, offsets_pointer, top_pointer, n_top,
                                                      self._steps_address, kept.ctypes.data, kept.shape[0])
        else:
            status = lib.ngramspec_batch_accept_trees_q(self._live("accept_trees"), ids_pointer, n, tokens_pointer,
                                                        n_tokens, offsets_pointer, top_pointer,
                                                        probabilities.ctypes.data, n_top, self._steps_address,
                                                        kept.ctypes.data, kept.shape[0])
        if status:
            raise_status(status)
        return steps[:n], kept[:n_tokens]

    @property
    def tree(self) -> bool:
        """Whether the drafters draft trees (``tree=`` at construction)."""
        return self._tree

    @property
    def top_k(self) -> int:
        """Top tokens per pass entry that :meth:`accept_trees` takes (0: none, a chain batch, or closed)."""
        return int(lib.ngramspec_batch_top_k(self._handle))

    # ---- State -----------------------------------------------------------------------------

    @property
    def memory_bytes(self) -> int:
        """Bytes the native speculator holds: its drafters, records and scratch (fixed at creation
        but for the scratch, which grows with the largest batch; 0 once closed)."""
        return int(lib.ngramspec_batch_memory_bytes(self._handle))

    @property
    def stats(self) -> BatchStats:
        """Running totals: propose calls, drafts verified, drafts accepted, tokens emitted, and draft
        tokens dropped outside the vocabulary."""
        out = _CBatchStats()
        status = lib.ngramspec_batch_stats_get_sized(self._live("stats"), ctypes.byref(out), ctypes.sizeof(out))
        if status:
            raise_status(status)
        return BatchStats(int(out.proposals), int(out.drafted), int(out.accepted), int(out.emitted),
                          int(out.out_of_vocabulary))

    # ---- The learned cost ------------------------------------------------------------------

    @property
    def cost(self) -> str | None:
        """The cost spec given at creation (``"learn"``, ``"learn:knee:64"``, ``"knee:64"``), or None."""
        return self._cost

    @property
    def learns_cost(self) -> bool:
        """Whether the cost is learned from the passes served (`cost` ``"learn"`` or ``"learn:SPEC"``)."""
        return bool(lib.ngramspec_batch_learns_cost(self._live("learns_cost")))

    def report_pass_seconds(self, seconds: float) -> None:
        """The time the engine took to run the pass proposed last (its forward, synchronized on a GPU,
        and whatever else it counts as the pass's), in seconds: call it between :meth:`propose` (or
        :meth:`propose_trees`) and the accept of that pass; without it the pass is timed from the end
        of propose to the start of accept. Raises ValueError naming the value, nothing learned, when
        `seconds` is not finite and positive, the speculator does not learn its cost, or no pass was
        proposed since the last accept."""
        status = lib.ngramspec_batch_report_pass_seconds(self._live("report_pass_seconds"), float(seconds))
        if status:
            raise_status(status)

    def describe_cost(self) -> str:
        """What the speculator plans against: for a learned cost, one line per batch size served
        (passes, plain-pass time, shape-change price, whether the prior is trusted, the ratios
        measured; "" before any pass); for a fixed cost its spec; without a cost ""."""
        return read_text(lib.ngramspec_batch_describe_cost, self._live("describe_cost"))

    @property
    def learned_cost_stats(self) -> LearnedCostStats:
        """What the learned cost observed (passes, seconds, plain passes, exploration); ValueError when
        the speculator does not learn its cost."""
        return learned_stats(lib.ngramspec_batch_learned_cost_stats, self._live("learned_cost_stats"))

    @property
    def max_sequences(self) -> int:
        """Sequences that may run at once (the pool's size)."""
        return self._max_sequences

    @property
    def corpus(self) -> SharedCorpus | None:
        """The corpus :meth:`finish` appends to, or None."""
        return self._corpus

    @property
    def corpus_file(self) -> MappedCorpus | None:
        """The corpus file the drafters consult, or None."""
        return self._corpus_file

    @property
    def corpus_preference(self) -> CorpusPreferenceName:
        """Which corpus drafts when the live corpus and the corpus file both match."""
        return self._corpus_preference

    def close(self) -> None:
        """Frees the native speculator now (also done when the object is collected); later calls raise ValueError."""
        handle, self._handle = self._handle, None
        if handle is not None:
            lib.ngramspec_batch_free(handle)
            corpus, self._corpus = self._corpus, None
            if corpus is not None:
                corpus._detach()
            corpus_file, self._corpus_file = self._corpus_file, None
            if corpus_file is not None:
                corpus_file._detach()

    def __repr__(self) -> str:
        if self._handle is None:
            return "<ngramspec.BatchSpeculator closed>"
        return (f"<ngramspec.BatchSpeculator {len(self)}/{self._max_sequences} sequences, cost={self._cost!r}, "
                f"{self.memory_bytes} bytes>")


_TREE_SETTINGS = ("successor_slots", "max_children", "vocab_size", "top_k", "shared_top_k", "carry_over",
                  "enrich_counts", "draw_recycled", "draw_seed", "recycled_history")


def _tree_config(tree: Any) -> _CTreeConfig | None:
    """The C tree configuration of `tree` (True, or a dict of settings), or None for False."""
    if tree is False or tree is None:
        return None
    # This struct's size, so that a later library, whose struct may be larger, writes this version's fields.
    config = _CTreeConfig()
    status = lib.ngramspec_tree_config_init(ctypes.byref(config), ctypes.sizeof(config))
    if status:
        raise_status(status)
    if tree is True:
        return config
    if not isinstance(tree, Mapping):
        raise TypeError(f"tree must be a bool or a dict of tree settings, not {type(tree).__name__}")
    for name, value in tree.items():
        if name not in _TREE_SETTINGS:
            raise TypeError(f"unknown tree setting {name!r}; the settings are {', '.join(_TREE_SETTINGS)}")
        if name in ("shared_top_k", "carry_over", "enrich_counts", "draw_recycled"):
            if not isinstance(value, (bool, np.bool_)):
                raise TypeError(f"tree setting {name} must be a bool, not {type(value).__name__}")
            setattr(config, name, 1 if value else 0)
        elif name == "recycled_history":
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
                raise TypeError(f"tree setting recycled_history must be a number, not {type(value).__name__}")
            config.recycled_history = float32_arg(value, "tree setting recycled_history")  # its range: the library's
        else:
            setattr(config, name, size_arg(value, f"tree setting {name}"))
    if "recycled_history" in tree and not config.draw_recycled:
        raise ValueError("tree setting recycled_history weighs the distributions drawn from: it needs draw_recycled")
    return config


def _id(seq_id: Any) -> int:
    if isinstance(seq_id, bool) or not isinstance(seq_id, (int, np.integer)):
        raise TypeError(f"a sequence id must be an int, not {type(seq_id).__name__}")
    value = int(seq_id)
    if not 0 <= value < 1 << 64:
        raise ValueError(f"sequence id {value} is invalid: ids are integers from 0 to 2**64 - 1")
    return value
