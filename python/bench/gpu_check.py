#!/usr/bin/env python3
"""Everything measured on a GPU, in one run: the transformers adapter on the machine's transformers,
ngramspec against transformers' own prompt lookup on stories260K, and the batch planner timed on a
real forward. For a machine with one NVIDIA GPU, torch and transformers installed, and no network;
about 5-8 minutes on an H100/H200.

1. The real-library tests: python/tests/test_hf_transformers.py (model.generate with use_ngramspec,
   on the GPU, token for token against plain generate) and test_hf_adapter.py, run by pytest.
2. stories260K (../shared/models, a llama2.c checkpoint) converted to transformers' LlamaForCausalLM
   (fp32 on the GPU; the RoPE rows of wq and wk reordered from llama2.c's adjacent pairs to
   transformers' halves), checked against llama2.c's golden 256 tokens from BOS; then the first
   `--prompts` prompts of integrations/llama.cpp/prompts/stories20.txt x `--tokens` tokens, greedy
   and sampled (temperature 1, top-k and top-p off): plain generate, transformers' prompt lookup
   (prompt_lookup_num_tokens = k) and ngramspec (use_ngramspec, its default cost="measure"; one
   install per k kept for the whole run, so its cost is measured once, in the untimed warm-up, and its
   calibration carries over from prompt to prompt as it would in a server), k = 3, 10, 16, 32. Each
   generate is timed with CUDA synchronisation and counted in forwards (a pre-hook on model.model);
   the methods take turns per prompt. Greedy outputs must equal plain generate's.
3. python/bench/batch_planner_gpu.py: the Spec-Bench streams served through BatchSpeculator on
   random-weight 1.1B and 8B Llamas (bf16), batches 1, 8, 32, 64, policies plain, k4, k10, cost.

The figures go to `--out` (default $OUT/gpu_figures.json, else gpu_figures.json), written after
each part, with the targets of docs/BENCHMARKS.md checked at the end. The ngramspec library is found
as the package finds it (NGRAMSPEC_LIBRARY, else the repository's build trees); when none is built,
this script builds one first (cmake --preset release, target ngramspec_c). Exit status: 0 when the
run completed (whatever the figures), 1 when a part failed (the tests, an output that differs).

    python3 python/bench/gpu_check.py                      # all three parts
    python3 python/bench/gpu_check.py --parts adapter      # one part: tests, adapter, planner
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PYTHON_DIR = REPO / "python"


def default_shared() -> Path:
    for candidate in (REPO.parent / "shared", REPO / "shared"):
        if (candidate / "models").is_dir():
            return candidate
    return REPO.parent / "shared"


def log(*parts: object) -> None:
    print(*parts, flush=True)


def ensure_library() -> None:
    """Makes `import ngramspec` work: the package from the source tree, and a library built if none is."""
    sys.path.insert(0, str(PYTHON_DIR))
    try:
        import ngramspec  # noqa: F401
        return
    except ImportError as error:
        log(f"ngramspec does not import ({str(error).splitlines()[0]}); building the library")
    build = REPO / "build" / "release"
    subprocess.run(["cmake", "--preset", "release", "-DNGRAMSPEC_BUILD_TESTS=OFF", "-DNGRAMSPEC_BUILD_BENCHMARKS=OFF",
                    "-DNGRAMSPEC_BUILD_TOOLS=OFF", "-DNGRAMSPEC_BUILD_EXAMPLES=OFF"], cwd=REPO, check=True)
    subprocess.run(["cmake", "--build", str(build), "--target", "ngramspec_c", "-j", str(os.cpu_count() or 4)],
                   cwd=REPO, check=True)
    os.environ["NGRAMSPEC_LIBRARY"] = str(build / "libngramspec.so")
    importlib.import_module("ngramspec")


def load_module(path: Path, name: str):  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# ---- 1. The real-library tests -------------------------------------------------------------------


def part_tests(results: dict, args: argparse.Namespace) -> bool:
    env = dict(os.environ, PYTHONPATH=str(PYTHON_DIR))
    command = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
               str(PYTHON_DIR / "tests" / "test_hf_transformers.py"), str(PYTHON_DIR / "tests" / "test_hf_adapter.py")]
    started = time.perf_counter()
    run = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True)
    tail = (run.stdout + run.stderr).strip().splitlines()[-15:]
    results["tests"] = {"returncode": run.returncode, "seconds": time.perf_counter() - started, "tail": tail}
    log("\n".join(tail))
    return run.returncode == 0


# ---- 2. stories260K: ngramspec against prompt lookup ---------------------------------------------


def halves_from_pairs(w, heads: int):  # type: ignore[no-untyped-def]
    """The rows of a llama2.c query/key projection (RoPE on adjacent pairs) reordered for
    transformers' rotate_half (RoPE on the two halves of each head)."""
    rows, cols = w.shape
    size = rows // heads
    return w.reshape(heads, size // 2, 2, cols).transpose(0, 2, 1, 3).reshape(rows, cols).copy()


def stories_model(models: Path, engine, torch, transformers):  # type: ignore[no-untyped-def]
    import numpy as np

    config, w = engine.read_checkpoint(models / "stories260K.bin")
    hf = transformers.LlamaConfig(vocab_size=config.vocab_size, hidden_size=config.dim,
                                  intermediate_size=config.hidden_dim, num_hidden_layers=config.n_layers,
                                  num_attention_heads=config.n_heads, num_key_value_heads=config.n_kv_heads,
                                  max_position_embeddings=config.seq_len, rms_norm_eps=1e-5,
                                  tie_word_embeddings=config.shared_classifier, bos_token_id=1, eos_token_id=None,
                                  pad_token_id=0)
    state = {"model.embed_tokens.weight": w["token_embedding"], "model.norm.weight": w["rms_final"],
             "lm_head.weight": w["classifier"]}
    for i in range(config.n_layers):
        p = f"model.layers.{i}."
        state[p + "self_attn.q_proj.weight"] = halves_from_pairs(w["wq"][i], config.n_heads)
        state[p + "self_attn.k_proj.weight"] = halves_from_pairs(w["wk"][i], config.n_kv_heads)
        state[p + "self_attn.v_proj.weight"] = w["wv"][i]
        state[p + "self_attn.o_proj.weight"] = w["wo"][i]
        state[p + "mlp.gate_proj.weight"] = w["w1"][i]
        state[p + "mlp.down_proj.weight"] = w["w2"][i]
        state[p + "mlp.up_proj.weight"] = w["w3"][i]
        state[p + "input_layernorm.weight"] = w["rms_att"][i]
        state[p + "post_attention_layernorm.weight"] = w["rms_ffn"][i]
    model = transformers.LlamaForCausalLM(hf)
    model.load_state_dict({k: torch.from_numpy(np.array(v, dtype=np.float32)) for k, v in state.items()},
                          strict=False)
    model = model.to("cuda").float().eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model, config


def part_adapter(results: dict, args: argparse.Namespace) -> bool:
    import torch
    import transformers

    from ngramspec.adapters.hf import use_ngramspec

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    engine = load_module(REPO / "examples" / "python" / "llama2_engine.py", "llama2_engine")
    models = args.shared / "models"
    model, config = stories_model(models, engine, torch, transformers)
    forwards = [0]
    model.model.register_forward_pre_hook(lambda *_: forwards.__setitem__(0, forwards[0] + 1))
    tokenizer = engine.Tokenizer(models / "tok512.bin", config.vocab_size)
    ks = [int(k) for k in args.ks.split(",")]
    installed = {}  # k -> (the _get_candidate_generator use_ngramspec made, its state)
    for k in ks:
        use_ngramspec(model)
        installed[k] = (model._get_candidate_generator, model._ngramspec_state)
        del model._get_candidate_generator

    def generate(ids: list, n: int, method: str, k: int | None, sample: bool) -> tuple[list, float, int]:
        x = torch.tensor([ids], device="cuda")
        kwargs = dict(max_new_tokens=n, attention_mask=torch.ones_like(x), pad_token_id=0, do_sample=sample)
        if sample:
            kwargs.update(temperature=1.0, top_k=0, top_p=1.0)
            torch.manual_seed(1234)
        if k is not None:
            kwargs["prompt_lookup_num_tokens"] = k
        if method == "ngramspec":
            model._get_candidate_generator = installed[k][0]
        try:
            forwards[0] = 0
            torch.cuda.synchronize()
            started = time.perf_counter()
            with torch.no_grad():
                out = model.generate(x, **kwargs)
            torch.cuda.synchronize()
            seconds = time.perf_counter() - started
        finally:
            if method == "ngramspec":
                del model._get_candidate_generator
        return out[0, len(ids):].tolist(), seconds, forwards[0]

    golden = [int(t) for t in (models / "stories260K_greedy256.ids").read_text().split()]
    out, _, _ = generate([1], 256, "plain", None, False)
    first_difference = next((i for i, (a, b) in enumerate(zip(out, golden)) if a != b), None)
    results["adapter"] = {"golden": {"match": out == golden, "first_difference": first_difference},
                          "transformers": transformers.__version__, "torch": torch.__version__}
    log("golden 256 from BOS:", results["adapter"]["golden"])
    lines = (REPO / "integrations" / "llama.cpp" / "prompts" / "stories20.txt").read_text().splitlines()
    prompts = [line.strip() for line in lines if line.strip()][:args.prompts]
    methods = [("plain", None)] + [(m, k) for k in ks for m in ("pld", "ngramspec")]
    identical_everywhere = True
    for sample in (False, True):
        mode = "sampled" if sample else "greedy"
        for method, k in methods:  # warm-up: kernels, and ngramspec's cost measured at first use
            generate(tokenizer.encode(prompts[0]), 16, method, k, sample)
        rows = {f"{m}-{k}" if k else m: {"seconds": 0.0, "tokens": 0, "forwards": 0, "identical": 0}
                for m, k in methods}
        for i, prompt in enumerate(prompts):
            ids = tokenizer.encode(prompt)
            order = methods[i % len(methods):] + methods[:i % len(methods)]
            outputs = {}
            for method, k in order:
                name = f"{method}-{k}" if k else method
                tokens, seconds, count = generate(ids, args.tokens, method, k, sample)
                outputs[name] = tokens
                row = rows[name]
                row["seconds"] += seconds
                row["tokens"] += len(tokens)
                row["forwards"] += count
            for name in rows:
                rows[name]["identical"] += int(outputs[name] == outputs["plain"])
        for name, row in rows.items():
            row["tokens_per_forward"] = row["tokens"] / max(1, row["forwards"])
            row["speedup"] = rows["plain"]["seconds"] / row["seconds"]
            if not sample and row["identical"] != len(prompts):
                identical_everywhere = False
        for k in ks:
            state = installed[k][1]
            rows[f"ngramspec-{k}"]["cost"] = state["cost"].spec if state["cost"] is not None else None
            generator = state.get("generator")
            if generator is not None:
                rows[f"ngramspec-{k}"]["last_generation"] = {"drafted": generator.drafted, "withheld": generator.withheld,
                                                             "accepted": generator.accepted}
        results["adapter"][mode] = rows
        log(f"\nstories260K, {mode}, {len(prompts)} prompts x {args.tokens} tokens")
        log("| method | speedup vs plain | tokens/forward | identical to plain |")
        log("|---|---|---|---|")
        for name, row in rows.items():
            log(f"| {name} | {row['speedup']:.2f} | {row['tokens_per_forward']:.2f} | {row['identical']}/{len(prompts)} |")
    return identical_everywhere and results["adapter"]["golden"]["match"]


# ---- 3. The batch planner on a real forward ------------------------------------------------------


def part_planner(results: dict, args: argparse.Namespace) -> bool:
    bench = load_module(REPO / "python" / "bench" / "batch_planner_gpu.py", "batch_planner_gpu")
    out = Path(str(args.out) + ".planner.json")
    argv = ["--device", "cuda", "--shapes", args.shapes, "--batches", args.batches, "--out", str(out),
            "--streams", str(args.shared / "data" / "specbench" / "streams.tsv"),
            "--max-new-tokens", str(args.planner_tokens), "--requests-per-slot", str(args.requests_per_slot)]
    status = bench.main(argv)
    results["planner"] = json.loads(out.read_text()) if out.is_file() else {}
    results["planner"]["returncode"] = status
    return status == 0


# ---- Targets -------------------------------------------------------------------------------------


def targets(results: dict) -> list[str]:
    """The GPU run's checks (docs/BENCHMARKS.md, "On a GPU"), each 'met' or 'NOT met' with its figures."""
    lines = []

    def check(name: str, met: bool, figures: str) -> None:
        lines.append(f"{'met    ' if met else 'NOT met'}  {name}: {figures}")
    adapter = results.get("adapter", {})
    if "greedy" in adapter:
        greedy, sampled = adapter["greedy"], adapter["sampled"]
        best_ngs = max((r["speedup"], n) for n, r in greedy.items() if n.startswith("ngramspec"))
        best_pld = max((r["speedup"], n) for n, r in greedy.items() if n.startswith("pld"))
        check("greedy: ngramspec >= 1.5x plain", best_ngs[0] >= 1.5, f"{best_ngs[1]} {best_ngs[0]:.2f}x")
        check("greedy: ngramspec >= 1.15x prompt lookup at its best k", best_ngs[0] >= 1.15 * best_pld[0],
              f"{best_ngs[0] / best_pld[0]:.2f}x ({best_pld[1]} {best_pld[0]:.2f}x plain)")
        worst = min((r["speedup"], n) for n, r in sampled.items() if n.startswith("ngramspec"))
        check("T = 1: ngramspec >= 1.0x plain (every k)", worst[0] >= 1.0, f"{worst[1]} {worst[0]:.2f}x")
    rows = results.get("planner", {}).get("rows", [])
    for shape in sorted({r["shape"] for r in rows}):
        for batch in sorted({r["batch"] for r in rows if r["shape"] == shape}):
            here = {r["policy"]: r for r in rows if r["shape"] == shape and r["batch"] == batch}
            if "cost" not in here:
                continue
            fixed = max((r["speedup"] for p, r in here.items() if p.startswith("k")), default=0.0)
            cost = here["cost"]["speedup"]
            check(f"planner {shape} batch {batch}: cost >= 1.0x plain and >= the best fixed k",
                  cost >= 1.0 and cost >= fixed, f"cost {cost:.2f}x, best fixed {fixed:.2f}x")
            if shape == "8b" and batch == 1:
                check("planner 8b batch 1: cost >= 1.4x", cost >= 1.4, f"{cost:.2f}x")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", default="tests,adapter,planner", help="comma-separated: tests, adapter, planner")
    parser.add_argument("--shared", type=Path, default=default_shared(),
                        help="the folder with models/ and data/ (default: ../shared beside the repository, "
                             "else shared/ inside it)")
    parser.add_argument("--out", type=Path,
                        default=Path(os.environ.get("OUT", ".")) / "gpu_figures.json", help="where the figures go")
    parser.add_argument("--prompts", type=int, default=10, help="stories20 prompts (default 10)")
    parser.add_argument("--tokens", type=int, default=200, help="tokens per stories prompt (default 200)")
    parser.add_argument("--ks", default="3,10,16,32", help="draft counts for prompt lookup and ngramspec")
    parser.add_argument("--shapes", default="1.1b,8b", help="the planner's model shapes")
    parser.add_argument("--batches", default="1,8,32,64", help="the planner's batch sizes")
    parser.add_argument("--planner-tokens", type=int, default=128, help="the planner's tokens per request")
    parser.add_argument("--requests-per-slot", type=int, default=2, help="the planner's requests per batch slot")
    args = parser.parse_args(argv)
    parts = args.parts.split(",")
    unknown = [p for p in parts if p not in ("tests", "adapter", "planner")]
    if unknown:
        parser.error(f"--parts: unknown {unknown}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    ensure_library()
    import torch

    if not torch.cuda.is_available():
        print("error: torch sees no GPU; this script measures on one", file=sys.stderr)
        return 1
    import ngramspec

    results: dict = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
                     "ngramspec": ngramspec.__version__, "seconds": {}}
    ok = True
    for part in parts:
        started = time.perf_counter()
        try:
            passed = {"tests": part_tests, "adapter": part_adapter, "planner": part_planner}[part](results, args)
        except Exception:
            results[f"error_{part}"] = traceback.format_exc()
            log(results[f"error_{part}"])
            passed = False
        results["seconds"][part] = time.perf_counter() - started
        results.setdefault("passed", {})[part] = passed
        ok &= passed
        args.out.write_text(json.dumps(results, indent=1))
    results["targets"] = targets(results)
    args.out.write_text(json.dumps(results, indent=1))
    log("\n" + "\n".join(results["targets"]))
    log(f"\nfigures: {args.out}; seconds per part: { {k: round(v) for k, v in results['seconds'].items()} }")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
