"""ngramspec.adapters.hf inside the real transformers: ``model.generate`` with ``use_ngramspec``.

Runs whenever torch and transformers import (on a GPU when there is one, else on the CPU) and is
skipped, saying why, otherwise. A small random-weight ``LlamaForCausalLM`` in float32 generates from
prompts with repeats; every assisted generation (ngramspec's drafts sized by the measured cost, by a
flat cost that sends every candidate, and unsized) must give exactly plain greedy ``generate``'s
tokens. The GPU script (python/bench/gpu_check.py) runs this file on the transformers of its machine.
"""

from __future__ import annotations

import os

import pytest

if "asan" in os.environ.get("LD_PRELOAD", ""):
    pytest.skip("torch is not loaded into an AddressSanitizer process", allow_module_level=True)
torch = pytest.importorskip("torch", reason="torch is not installed")
transformers = pytest.importorskip("transformers", reason="transformers is not installed")

from ngramspec.adapters.hf import NgramspecCandidateGenerator, use_ngramspec  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture(scope="module")
def model():  # type: ignore[no-untyped-def]
    torch.manual_seed(28)
    config = transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                                      bos_token_id=1, eos_token_id=None, pad_token_id=0)
    llama = transformers.LlamaForCausalLM(config).to(DEVICE).float().eval()
    llama.generation_config.eos_token_id = None
    llama.generation_config.pad_token_id = 0
    return llama


def generate(model, prompt: list, **kwargs):  # type: ignore[no-untyped-def]
    x = torch.tensor([prompt], device=DEVICE)
    with torch.no_grad():
        out = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=48, pad_token_id=0, **kwargs)
    return out[0, len(prompt):].tolist()


PROMPTS = [[1] + list(range(10, 40)) * 3, [1, 5, 6, 7, 8] * 6, [1] + [int(t) for t in torch.randint(3, 256, (20,))]]


def test_every_candidate_generator_attribute_transformers_declares_is_there() -> None:
    """transformers' own CandidateGenerator base: every plain attribute it declares (what
    _assisted_decoding may read from any generator, requires_model_outputs in transformers 5)."""
    from transformers.generation.candidate_generator import CandidateGenerator

    declared = [name for name, value in vars(CandidateGenerator).items()
                if not name.startswith("__") and not callable(value)]
    missing = [name for name in declared if not hasattr(NgramspecCandidateGenerator, name)]
    assert not missing, f"transformers {transformers.__version__} declares {missing}"


@pytest.mark.parametrize("cost", ["measure", "flat", None])
@pytest.mark.parametrize("k", [3, 10])
def test_generate_with_ngramspec_is_plain_greedy_generate(model, cost, k: int) -> None:  # type: ignore[no-untyped-def]
    drafted = 0
    for prompt in PROMPTS:
        plain = generate(model, prompt, do_sample=False)
        use_ngramspec(model, cost=cost)
        try:
            assisted = generate(model, prompt, do_sample=False, prompt_lookup_num_tokens=k)
            generator = model._ngramspec_state["generator"]
        finally:
            del model._get_candidate_generator
        assert assisted == plain, (transformers.__version__, cost, k, prompt[:8])
        assert generator.calls > 0 and generator.num_output_tokens == k
        drafted += generator.drafted
    if cost != "measure":  # a flat cost, or none, sends every candidate
        assert drafted > 0


def test_sampling_with_ngramspec_generates_the_tokens_asked_for(model) -> None:  # type: ignore[no-untyped-def]
    use_ngramspec(model)
    try:
        torch.manual_seed(5)
        out = generate(model, PROMPTS[0], do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                       prompt_lookup_num_tokens=10)
        state = model._ngramspec_state
    finally:
        del model._get_candidate_generator
    assert len(out) == 48 and all(0 <= t < 256 for t in out)
    assert any(key[0] for key in state["calibrations"])  # the sampling setting got its own calibration
