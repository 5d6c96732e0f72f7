"""ngramspec.adapters.vllm.NgramspecProposer, driven the way vLLM's GPU model runner drives a proposer.

The fake below keeps vLLM's data and call sequence (vllm/v1/worker/gpu_input_batch.py and
gpu_model_runner.py; see the adapter's docstring for the versions), with a toy greedy model in
place of the GPU:

- ``FakeInputBatch``: ``token_ids_cpu`` (int32, max_num_reqs x max_model_len) and
  ``num_tokens_no_spec`` (int32, max_num_reqs); ``add_request`` writes a request's prompt and
  output from position 0 of the row it is given (or the next one), ``remove_request`` frees a row
  without clearing it, ``condense`` moves the last rows into the holes.
- ``FakeRunner.step``: ``_update_states`` (finished and preempted requests removed, new and resumed
  ones added into the freed rows, smallest first, then condense), the forward (a prefill, a chunk
  of one that samples nothing, or the last token plus the drafts scheduled for the request), greedy
  verification (drafts kept while they equal the model's token, then the model's own token), the
  bookkeeping (the sampled tokens written into the row at ``num_tokens_no_spec``, which advances),
  then ``drafter.propose(valid_sampled_token_ids, num_tokens_no_spec, token_ids_cpu,
  slot_mappings=None)``, whose lists become the requests' drafts for the next step.
- The proposer is loaded as ``create_custom_proposer`` loads it: the class at the dotted path
  ``speculative_config.model``, constructed with the config alone.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Callable

import numpy as np
import pytest

from ngramspec import LearnedCost
from ngramspec.adapters.vllm import NgramspecProposer

Model = Callable[[list], int]  # the toy greedy model: the next token after a sequence


def cycle_model(length: int = 17, base: int = 100) -> Model:
    """Repeating text: counts base, base + 1, ..., base + length - 1, base, ... from wherever it is."""
    return lambda tokens: base + (tokens[-1] - base + 1) % length if base <= tokens[-1] < base + length else base


def hashed_model(vocab: int = 5000, salt: int = 0) -> Model:
    """Text that does not repeat: the next token is a hash of the last three."""
    def next_token(tokens: list) -> int:
        h = salt
        for t in tokens[-3:]:
            h = (h * 1000003 + int(t) + 7) % (1 << 31)
        return 1000 + h % vocab
    return next_token


def vllm_config(k: float = 4, max_model_len: float = 256, max_num_seqs: int = 4,
                proposer: str = f"{__name__}.Gated") -> SimpleNamespace:
    """The parts of vLLM's VllmConfig a custom_class proposer reads."""
    return SimpleNamespace(
        speculative_config=SimpleNamespace(method="custom_class", model=proposer, num_speculative_tokens=k),
        model_config=SimpleNamespace(max_model_len=max_model_len),
        scheduler_config=SimpleNamespace(max_num_seqs=max_num_seqs))


def create_custom_proposer(config: SimpleNamespace):  # type: ignore[no-untyped-def]
    """As vLLM's create_custom_proposer: import the class at speculative_config.model, construct it
    with the config, require a callable propose."""
    module_path, class_name = config.speculative_config.model.rsplit(".", 1)
    instance = getattr(importlib.import_module(module_path), class_name)(config)
    assert callable(getattr(instance, "propose", None))
    return instance


class Gated(NgramspecProposer):
    cost = None  # each drafter's gate alone: the drafts these tests check do not depend on how long a step took


class NoCorpus(Gated):
    corpus_bytes = 0


class RetireAtOnce(Gated):
    patience = 0  # a request absent from one call has finished


class RetireAtOnceNoCorpus(RetireAtOnce):
    corpus_bytes = 0


@dataclass
class FakeRequest:
    req_id: str
    prompt: list
    max_tokens: int
    model: Model
    output: list = field(default_factory=list)
    computed: int = 0  # tokens prefilled so far (chunked prefill), of
    target: int = 0  # the tokens it held when it was added (prompt, and output when resumed)
    drafts: list = field(default_factory=list)  # the drafts scheduled for its next step
    proposed: list = field(default_factory=list)  # every draft list the proposer gave it
    accepted: int = 0  # drafts accepted
    steps: int = 0  # steps that sampled tokens for it

    @property
    def tokens(self) -> list:
        return self.prompt + self.output


class FakeInputBatch:
    """vLLM's InputBatch, the parts the proposer sees."""

    def __init__(self, max_num_reqs: int, max_model_len: int) -> None:
        self.max_num_reqs = max_num_reqs
        self.token_ids_cpu = np.zeros((max_num_reqs, max_model_len), dtype=np.int32)
        self.num_tokens_no_spec = np.zeros(max_num_reqs, dtype=np.int32)
        self._req_ids: list = []
        self.req_id_to_index: dict = {}

    @property
    def num_reqs(self) -> int:
        return len(self.req_id_to_index)

    @property
    def req_ids(self) -> list:
        return self._req_ids

    def add_request(self, request: FakeRequest, req_index: int | None = None) -> int:
        if req_index is None:
            req_index = self.num_reqs
        assert req_index < self.max_num_reqs
        if req_index == len(self._req_ids):
            self._req_ids.append(request.req_id)
        else:
            self._req_ids[req_index] = request.req_id
        self.req_id_to_index[request.req_id] = req_index
        tokens = request.tokens
        self.token_ids_cpu[req_index, :len(tokens)] = tokens
        self.num_tokens_no_spec[req_index] = len(tokens)
        return req_index

    def remove_request(self, req_id: str) -> int | None:
        req_index = self.req_id_to_index.pop(req_id, None)
        if req_index is not None:
            self._req_ids[req_index] = None  # the row's tokens stay where they are
        return req_index

    def condense(self, empty_req_indices: list) -> None:
        """Moves the last requests into the holes (empty_req_indices sorted in descending order)."""
        num_reqs = self.num_reqs
        if num_reqs == 0:
            self._req_ids.clear()
            return
        last = num_reqs + len(empty_req_indices) - 1
        while empty_req_indices:
            while last in empty_req_indices:
                last -= 1
            empty = empty_req_indices.pop()
            if empty >= last:
                break
            req_id = self._req_ids[last]
            self._req_ids[empty], self._req_ids[last] = req_id, None
            self.req_id_to_index[req_id] = empty
            n = self.num_tokens_no_spec[last]
            self.token_ids_cpu[empty, :n] = self.token_ids_cpu[last, :n]
            self.num_tokens_no_spec[empty] = n
            last -= 1
        del self._req_ids[self.num_reqs:]


class FakeRunner:
    """vLLM's model runner and scheduler, reduced to what decides the proposer's inputs."""

    def __init__(self, config: SimpleNamespace, chunk: int = 0) -> None:
        self.config = config
        self.max_model_len = config.model_config.max_model_len
        self.drafter = create_custom_proposer(config)
        if hasattr(self.drafter, "load_model"):
            self.drafter.load_model(None)
        self.input_batch = FakeInputBatch(config.scheduler_config.max_num_seqs, self.max_model_len)
        self.requests: dict = {}
        self.chunk = chunk  # prefill chunk size; 0: whole prompts
        self.calls: list = []  # (sampled_token_ids, num_tokens_no_spec copy, drafts) of every propose

    def done(self, request: FakeRequest) -> bool:
        return len(request.output) >= request.max_tokens or len(request.tokens) >= self.max_model_len

    def step(self, new: tuple = (), preempted: tuple = ()) -> None:
        batch = self.input_batch
        # _update_states: finished and preempted requests leave, new and resumed ones take freed rows.
        removed = []
        for req_id in [r for r in batch.req_ids if r is not None and self.done(self.requests[r])]:
            removed.append(batch.remove_request(req_id))
        for req_id in preempted:
            removed.append(batch.remove_request(req_id))
            request = self.requests[req_id]
            request.drafts = []  # its KV cache is freed: it is prefilled again when it returns
        removed = sorted((i for i in removed if i is not None), reverse=True)
        for request in new:
            self.requests[request.req_id] = request
            request.computed, request.target = 0, len(request.tokens)
            batch.add_request(request, removed.pop() if removed else None)
        if removed:
            batch.condense(removed)

        # The forward, greedy verification and the bookkeeping, row by row.
        valid_sampled_token_ids = []
        for row in range(batch.num_reqs):
            request = self.requests[batch.req_ids[row]]
            tokens = request.tokens
            if request.computed < request.target:  # a prefill (of a new or a resumed request)
                request.computed = min(request.target, request.computed + self.chunk) if self.chunk else request.target
                sampled = [request.model(tokens)] if request.computed == request.target else []
            else:
                drafts = request.drafts[:max(0, self.max_model_len - len(tokens) - 1)]
                sampled = []
                for draft in drafts:
                    target = request.model(tokens + sampled)
                    if draft != target:
                        break
                    sampled.append(target)
                request.accepted += len(sampled)
                sampled.append(request.model(tokens + sampled))
            sampled = sampled[:request.max_tokens - len(request.output)]
            if sampled:
                start = int(batch.num_tokens_no_spec[row])
                batch.token_ids_cpu[row, start:start + len(sampled)] = sampled
                batch.num_tokens_no_spec[row] = start + len(sampled)
                request.output.extend(sampled)
                request.steps += 1
            valid_sampled_token_ids.append(sampled)

        # propose_draft_token_ids, method == "custom_class".
        drafts = self.drafter.propose(valid_sampled_token_ids, batch.num_tokens_no_spec, batch.token_ids_cpu,
                                      slot_mappings=None)
        assert isinstance(drafts, list) and len(drafts) == len(valid_sampled_token_ids)
        self.calls.append((valid_sampled_token_ids, batch.num_tokens_no_spec[:batch.num_reqs].copy(), drafts))
        for row, row_drafts in enumerate(drafts):
            request = self.requests[batch.req_ids[row]]
            assert all(type(t) is int for t in row_drafts)
            request.drafts = list(row_drafts)
            if row_drafts:
                request.proposed.append(list(row_drafts))

    def serve(self, requests: list, max_steps: int = 10_000) -> None:
        """Admits `requests` in order as rows free up, until every one is done."""
        waiting = list(requests)
        for _ in range(max_steps):
            running = sum(1 for r in self.input_batch.req_ids if r is not None and not self.done(self.requests[r]))
            admit = []
            while waiting and running + len(admit) < self.input_batch.max_num_reqs:
                admit.append(waiting.pop(0))
            if not waiting and not admit and running == 0:
                return
            self.step(new=tuple(admit))
        raise AssertionError("the fake engine did not finish")


def greedy(model: Model, prompt: list, max_tokens: int) -> list:
    tokens = list(prompt)
    for _ in range(max_tokens):
        tokens.append(model(tokens))
    return tokens[len(prompt):]


# ---- Tests ----------------------------------------------------------------------------------------


def test_the_proposer_loads_and_answers_as_vllm_expects() -> None:
    runner = FakeRunner(vllm_config(k=3, max_model_len=40, max_num_seqs=4))
    proposer = runner.drafter
    assert isinstance(proposer, NgramspecProposer) and proposer.k == 3 and proposer.max_model_len == 40
    batch = runner.input_batch
    tokens, counts = batch.token_ids_cpu, batch.num_tokens_no_spec
    period = list(range(100, 110))
    tokens[0, :30] = period * 3
    counts[0] = 30
    tokens[1, :12] = period + period[:2]
    counts[1] = 12
    tokens[2, :39] = (period * 4)[:39]
    counts[2] = 39
    # Row 0 sampled its last token; row 1 is a prefill chunk (nothing sampled); row 2 is one token
    # short of max_model_len, so at most 1 draft fits (vLLM's NgramProposer caps the same way).
    drafts = proposer.propose([[109], [], [108]], counts, tokens, slot_mappings=None)
    assert drafts == [[100, 101, 102], [], [109]]
    counts[2] = 40
    tokens[2, 39] = 109
    assert proposer.propose([[101], [], [109]], counts, tokens)[2] == []  # at max_model_len: none
    with pytest.raises(ValueError, match="num_speculative_tokens"):
        NgramspecProposer(vllm_config(k=0))
    # A fractional setting is refused, not truncated (2.5 drafts would become 2).
    with pytest.raises(ValueError, match=r"num_speculative_tokens = 2\.5 is invalid: it must be a whole number"):
        NgramspecProposer(vllm_config(k=2.5))
    with pytest.raises(ValueError, match=r"max_model_len = 40\.5 is invalid"):
        NgramspecProposer(vllm_config(k=3, max_model_len=40.5))


def test_repeating_text_gets_its_drafts_accepted() -> None:
    runner = FakeRunner(vllm_config(k=4, max_model_len=256, max_num_seqs=3))
    requests = [FakeRequest(f"cycle-{i}", [100 + i, 101 + i], 120, cycle_model()) for i in range(4)]
    requests += [FakeRequest(f"hash-{i}", [7, 8, 9 + i], 60, hashed_model(salt=i)) for i in range(2)]
    runner.serve(requests)
    for request in requests:  # the verification is vLLM's, so the output is greedy's whatever was drafted
        assert request.output == greedy(request.model, request.prompt, request.max_tokens)
    for request in requests[:4]:  # a 17-token cycle: after one lap, nearly every draft is accepted
        tokens_per_step = len(request.output) / request.steps
        assert tokens_per_step > 3.0, (request.req_id, tokens_per_step)  # 1 a step for the first lap, then 5
        assert request.accepted > 0.8 * sum(len(d) for d in request.proposed)
    for request in requests[4:]:  # nothing repeats: the gate keeps the drafts few
        assert sum(len(d) for d in request.proposed) < len(request.output)
    assert runner.drafter.stats.begun == len(requests)


def test_a_reused_row_does_not_inherit_the_previous_requests_drafts() -> None:
    system = [5, 6, 7, 8, 9, 10, 11, 12, 13, 14]  # a shared "system prompt": the rows' first tokens agree
    later_prompts = {
        # The prompt of "a" again: the row's first tokens are the same, but it holds fewer tokens than "a" left.
        "shorter": system + [100],
        # More tokens than "a" left, the same first ones, the same tokens where "a"'s prompt was, ending in
        # "a"'s text: only the tokens where "a" stopped reading tell them apart.
        "longer": system + [100] + list(range(2000, 2100)) + [100, 101],
    }
    for name, prompt in later_prompts.items():
        runner = FakeRunner(vllm_config(k=4, max_model_len=256, max_num_seqs=1, proposer=f"{__name__}.NoCorpus"))
        first = FakeRequest("a", system + [100], 80, cycle_model())
        runner.serve([first])
        assert first.accepted > 40  # "a"'s drafter knows the cycle by heart
        # The same cycle follows, so a drafter that kept "a"'s state would draft it at once, and be right.
        later = FakeRequest(name, prompt, 8, cycle_model())
        runner.serve([later])
        assert runner.input_batch.req_id_to_index[name] == 0  # the row "a" had
        assert later.output == greedy(later.model, later.prompt, later.max_tokens)
        assert later.proposed == [], (name, later.proposed)  # its own text has no repeat to copy yet
        assert runner.drafter.stats.begun == 2 and runner.drafter.stats.moved == 0


def test_condense_and_preemption_keep_each_requests_drafter() -> None:
    runner = FakeRunner(vllm_config(k=4, max_model_len=256, max_num_seqs=4))
    requests = [FakeRequest(f"r{i}", [100 + i], 200 if i else 30, cycle_model()) for i in range(3)]
    runner.step(new=tuple(requests))
    for _ in range(15):
        runner.step()
    assert [runner.input_batch.req_id_to_index[r.req_id] for r in requests] == [0, 1, 2]
    while not runner.done(requests[0]):
        runner.step()
    runner.step()  # r0 finished: condense moves r2 from row 2 into row 0
    assert runner.input_batch.req_id_to_index["r2"] == 0
    assert runner.drafter.stats.moved == 1 and runner.drafter.stats.begun == 3
    assert runner.calls[-1][2][0], "r2 drafts right away in its new row"
    runner.step(preempted=("r1",))  # r1 loses its row for two steps, then comes back
    runner.step()
    runner.step(new=(requests[1],))
    assert runner.drafter.stats.begun == 3, "r1 resumed with its drafter"
    assert runner.calls[-1][2][runner.input_batch.req_id_to_index["r1"]], "r1 drafts right after its prefill"
    while any(not runner.done(r) for r in requests):
        runner.step()
    for request in requests:
        assert request.output == greedy(request.model, request.prompt, request.max_tokens)


def test_a_chunked_prefill_drafts_nothing_until_it_samples() -> None:
    runner = FakeRunner(vllm_config(k=4, max_model_len=256, max_num_seqs=2), chunk=8)
    prompt = [100 + i % 17 for i in range(40)]  # the cycle already twice in the prompt
    request = FakeRequest("long", prompt, 30, cycle_model())
    runner.step(new=(request,))
    assert runner.calls[-1][0] == [[]] and runner.calls[-1][2] == [[]]
    runner.serve([])
    assert request.output == greedy(request.model, prompt, 30)
    first_sampled = next(i for i, call in enumerate(runner.calls) if call[0][0])
    assert runner.calls[first_sampled][2][0], "drafts from the prompt right after the last chunk"
    assert len(request.output) / request.steps > 3.5


def test_finished_outputs_feed_the_corpus_that_later_requests_draft_from() -> None:
    def first_lap_drafts(proposer: str) -> tuple:
        runner = FakeRunner(vllm_config(k=4, max_model_len=256, max_num_seqs=1, proposer=proposer))
        earlier = FakeRequest("earlier", [100], 60, cycle_model())
        runner.serve([earlier])
        # The same text after another start, shorter than the cycle: alone it has nothing to copy.
        later = FakeRequest("later", [3, 4, 100], 16, cycle_model())
        runner.serve([later])
        assert later.output == greedy(later.model, later.prompt, 16)
        runner.step()  # "later" leaves its row: absent from a call, it has finished
        return later.accepted, runner.drafter.stats
    with_corpus, stats = first_lap_drafts(f"{__name__}.RetireAtOnce")
    without, _ = first_lap_drafts(f"{__name__}.RetireAtOnceNoCorpus")
    assert stats.corpus_records == 2 and stats.retired == 2
    assert with_corpus >= 10 and without <= 2, (with_corpus, without)
    # With the default patience, a request absent for a few calls is still waiting to come back.
    runner = FakeRunner(vllm_config(k=4, max_model_len=256, max_num_seqs=1))
    runner.serve([FakeRequest("only", [100], 20, cycle_model())])
    for calls in range(runner.drafter.patience + 1):
        runner.step()
        assert runner.drafter.stats.corpus_records == (1 if calls == runner.drafter.patience else 0)


def test_torch_tensors_are_read_like_numpy_arrays() -> None:
    if "asan" in os.environ.get("LD_PRELOAD", ""):
        pytest.skip("torch is not loaded into an AddressSanitizer process")
    torch = pytest.importorskip("torch", reason="torch is not installed")
    tokens = np.zeros((2, 32), np.int32)
    tokens[0, :20] = [100 + i % 7 for i in range(20)]
    counts = np.array([20, 0], np.int32)
    expected = Gated(vllm_config()).propose([[tokens[0, 19]]], counts, tokens)
    got = Gated(vllm_config()).propose([[int(tokens[0, 19])]], torch.from_numpy(counts),
                                                   torch.from_numpy(tokens))
    assert got == expected and got[0]
    # By keyword, as the CustomClassProposer form of vLLM's custom_class_proposer.py calls it.
    by_keyword = Gated(vllm_config()).propose(
        sampled_token_ids=[[int(tokens[0, 19])]], num_tokens_no_spec=torch.from_numpy(counts),
        token_ids_cpu=torch.from_numpy(tokens), slot_mappings=None)
    assert by_keyword == expected


def test_the_integrations_doc_configures_this_proposer() -> None:
    from pathlib import Path
    import re

    doc = Path(__file__).resolve().parents[2] / "docs" / "INTEGRATIONS.md"
    if not doc.is_file():
        pytest.skip("no docs/INTEGRATIONS.md (the tests run outside the source tree)")
    section = doc.read_text().split("\n## vLLM\n")[1].split("\n## ")[0]
    method = re.search(r'"method": "([^"]+)"', section)
    model = re.search(r'"model": "([^"]+)"', section)
    assert method and method.group(1) == "custom_class"
    assert model and isinstance(create_custom_proposer(vllm_config(proposer=model.group(1))), NgramspecProposer)


class FlatCost(NgramspecProposer):
    cost = "flat"  # a fixed curve: every pass costs what a plain one does, so every candidate is worth sending


class SteepCost(NgramspecProposer):
    cost = "table:1=1,2=2,3=3,4=4,5=5,6=6,7=7,8=8"  # every token dear: no draft is worth it


def test_the_default_proposer_learns_its_cost_from_the_steps_it_serves() -> None:
    """By default (cost "learn") the drafts are sized by a cost learned from the steps: each call times the
    step since the last one, unless that step began a request or ran a prefill chunk. The output is greedy's
    whatever was learned, and every step timed is one pass the learned cost observed."""
    assert NgramspecProposer.cost == "learn"
    runner = FakeRunner(vllm_config(k=4, max_model_len=256, max_num_seqs=3,
                                    proposer="ngramspec.adapters.vllm.NgramspecProposer"))
    requests = [FakeRequest(f"cycle-{i}", [100 + i, 101 + i], 120, cycle_model()) for i in range(4)]
    runner.serve(requests)
    for request in requests:
        assert request.output == greedy(request.model, request.prompt, request.max_tokens)
    proposer = runner.drafter
    learned = proposer._cost
    assert isinstance(learned, LearnedCost)
    assert 0 < proposer.stats.timed < proposer.stats.calls and learned.stats.passes == proposer.stats.timed
    assert "sequences: " in learned.describe()


def test_a_fixed_cost_sizes_the_drafts_without_the_gate() -> None:
    for proposer, drafts_pay in ((FlatCost, True), (SteepCost, False)):
        runner = FakeRunner(vllm_config(k=4, max_model_len=256, max_num_seqs=3,
                                        proposer=f"{__name__}.{proposer.__name__}"))
        requests = [FakeRequest(f"cycle-{i}", [100 + i, 101 + i], 120, cycle_model()) for i in range(3)]
        runner.serve(requests)
        for request in requests:
            assert request.output == greedy(request.model, request.prompt, request.max_tokens)
        stats = runner.drafter.stats
        assert stats.timed == 0  # a fixed curve learns nothing
        if drafts_pay:
            assert stats.withheld == 0 and all(len(r.output) / r.steps > 3.0 for r in requests), stats
        else:
            assert stats.drafted == 0 and stats.withheld > 0, stats


def test_a_bad_cost_is_refused_by_name() -> None:
    class Unknown(NgramspecProposer):
        cost = "learn:kne:4"

    class NotText(NgramspecProposer):
        cost = 4  # type: ignore[assignment]

    with pytest.raises(ValueError, match="prior 'kne:4' is not a cost"):
        Unknown(vllm_config())
    with pytest.raises(TypeError, match="NgramspecProposer.cost must be a str"):
        NotText(vllm_config())
