"""Adapters that plug ngramspec's drafters into other engines' speculative decoding.

- :mod:`ngramspec.adapters.vllm`: :class:`~ngramspec.adapters.vllm.NgramspecProposer`, a proposer
  for vLLM's ``method="custom_class"``.
- :mod:`ngramspec.adapters.hf`: :class:`~ngramspec.adapters.hf.NgramspecCandidateGenerator`, a
  candidate generator for Hugging Face transformers' assisted generation, and
  :func:`~ngramspec.adapters.hf.use_ngramspec`, which installs it on a model.

Neither module imports vLLM or transformers: each follows the interface its engine calls, so
importing an adapter costs nothing but ngramspec and NumPy (torch only where a tensor is handed in).
"""
