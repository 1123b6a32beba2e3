"""The host phases of one lm-eval call as qeval's kept worker makes it (qeval/workers/lmeval_session.py), timed inside
the process: run by benchmarks/lmeval_overhead.py --standin in the vLLM tool env (it has lm-eval; this file imports
nothing of qeval). One JSON argument says what to do; one JSON line is printed after `RESULT `.

{"args": lm-eval's command line, "call": the kept worker's call, "next_token_top_k": k | null, "plain": bool,
 "spawned": the parent's time.time() when it started this process}

`plain`: lm-eval as it comes (its sqlitedict request cache committing every answer, its templates compiled at every
use, its own task index, its tokenizing one string a call), the worker's other settings the same; else the worker
as qeval runs it. Each phase is
the time spent inside lm-eval's own function for it (wrapped here, its result untouched).
"""

from __future__ import annotations

import collections
import functools
import json
import os
import sys
import time

WORKERS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "qeval", "workers")
SECONDS: dict[str, float] = collections.defaultdict(float)
CALLS: collections.Counter = collections.Counter()
NOW = {"phase": ""}  # the timed phase under way (the cache's writes are counted into the one they happen in)


def timed(owner, name: str, phase: str) -> None:
    """`owner.name` (a function, method or classmethod) counted into `phase` each time it runs."""
    raw = owner.__dict__.get(name) if isinstance(owner, type) else None
    cm = isinstance(raw, classmethod)
    f = raw.__func__ if cm else getattr(owner, name)

    @functools.wraps(f)
    def g(*a, **k):
        t, outer = time.perf_counter(), NOW["phase"]
        NOW["phase"] = phase
        try:
            return f(*a, **k)
        finally:
            NOW["phase"] = outer
            SECONDS[phase] += time.perf_counter() - t
            CALLS[phase] += 1

    setattr(owner, name, classmethod(g) if cm else g)


def main(a: dict) -> dict:
    sys.path.insert(0, WORKERS)
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    import lm_eval.api.model as model
    import lm_eval.api.registry
    import lm_eval.api.task as task
    import lm_eval.config.evaluate_config as evaluate_config
    import lm_eval.models.api_models as api_models
    import lm_eval.models.openai_completions  # noqa: F401 - registers local-completions
    import lmeval_session

    if not a["plain"]:
        from lmeval_cache import batch_cache_writes, compile_templates_once

        batch_cache_writes()
        compile_templates_once()
    else:
        lmeval_session._included_only = lambda cfg: None  # lm-eval's own index of every task
    if a["next_token_top_k"] is not None:
        import lmeval_next_token

        lmeval_next_token.register(os.devnull, a["next_token_top_k"])
        ours = lm_eval.api.registry.get_model("qeval-next-token")
        if a["plain"]:  # lm-eval's own tokenizing, one string a call
            del ours.loglikelihood, ours.tok_encode
        else:  # its own tokenizing first, then lm-eval's loglikelihood: the one timed
            timed(ours, "loglikelihood", "tokenizing")
        timed(ours, "_loglikelihood_tokens", "http")
    imported = time.time() - a["spawned"]

    timed(lmeval_session, "_included_only", "task index")
    timed(evaluate_config.EvaluatorConfig, "process_tasks", "task index")
    timed(lmeval_session.Session, "_objects", "task build")
    timed(model.LM, "create_from_arg_obj", "client (tokenizer load)")
    timed(task.Task, "build_all_requests", "request building")
    if a["next_token_top_k"] is None or a["plain"]:
        timed(model.TemplateLM, "loglikelihood", "tokenizing")  # the time of _loglikelihood_tokens taken off below
    timed(api_models.TemplateAPI, "_loglikelihood_tokens", "http")
    t0 = time.perf_counter()
    session = lmeval_session.Session(a["args"])
    session_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    cache = collections.defaultdict(float)
    real = model.CachingLM

    class Timed(real):  # the cache the call opens, its reads and writes timed
        def __init__(self, lm, path):
            super().__init__(lm, path)
            d = self.dbdict
            for op, name in (("in", "__contains__"), ("set", "__setitem__")):
                f = getattr(type(d), name)

                def g(self_, *x, _f=f, _op=op):
                    t = time.perf_counter()
                    try:
                        return _f(self_, *x)
                    finally:
                        cache[_op, NOW["phase"] == "http"] += time.perf_counter() - t
                setattr(type(d), name, g)

    model.CachingLM = Timed
    session.evaluate(a["call"])
    model.CachingLM = real
    evaluate_s = time.perf_counter() - t1
    s = dict(SECONDS)
    http = s.get("http", 0.0)
    s["tokenizing"] = s.get("tokenizing", 0.0) - http
    s["cache check"] = cache["in", False] + cache["in", True]
    s["cache writes during http"] = cache["set", True]
    s["cache writes after http"] = cache["set", False]
    named = sum(s.get(k, 0.0) for k in ("request building", "tokenizing", "http", "cache check",
                                        "cache writes after http"))
    return {"process start + imports": imported, "session": session_s, "evaluate": evaluate_s,
            "scoring + writing samples": evaluate_s - named, **s}


if __name__ == "__main__":
    result = main(json.loads(sys.argv[1]))
    print("RESULT " + json.dumps(result), flush=True)
