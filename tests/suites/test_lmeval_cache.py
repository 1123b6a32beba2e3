"""The kept lm-eval worker's request cache, written in batches on sqlitedict's file (each reads the other's), its
task templates compiled once (the same prompts), and its task index over the include path alone where that path
holds every task named. The cross-checks run real lm-eval and sqlitedict in the engine's environment."""

from __future__ import annotations

import json
import pickle
import shutil
import sqlite3
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

from qeval.settings import Settings
from qeval.suites.lmeval_tasks import materialize_tasks
from qeval.suites.spec import LmEvalSuiteRef
from qeval.workers.lmeval_cache import TABLE, RequestCache

ROOT = Path(__file__).resolve().parents[2]
WORKERS = ROOT / "qeval" / "workers"


def _on_disk(path: Path) -> dict:
    with sqlite3.connect(path) as c:  # another connection: what a killed process would have left
        return {k: pickle.loads(v) for k, v in c.execute(f'SELECT key, value FROM "{TABLE}"')}


def test_answers_are_committed_in_batches_and_all_of_them_at_close(tmp_path):
    db = tmp_path / "cache_rank0.db"
    cache = RequestCache(str(db), flush_every=3, flush_s=3600)
    cache["a"], cache["b"] = (-1.5, True), (-2.0, False)
    assert "a" in cache and cache["b"] == (-2.0, False)  # read back before they are committed
    assert _on_disk(db) == {}
    cache["c"] = (-0.5, True)  # the third: the batch is committed
    assert _on_disk(db) == {"a": (-1.5, True), "b": (-2.0, False), "c": (-0.5, True)}
    cache["a"] = (-9.0, False)  # written again (lm-eval writes each answer twice): the later one wins
    cache.close()
    assert _on_disk(db)["a"] == (-9.0, False)
    again = RequestCache(str(db))
    assert "c" in again and again["c"] == (-0.5, True) and "z" not in again
    with pytest.raises(KeyError):
        again["z"]
    again.close()


def test_an_answer_waits_no_longer_than_the_time_limit(tmp_path):
    db = tmp_path / "c.db"
    cache = RequestCache(str(db), flush_every=10**6, flush_s=0.05)
    cache["a"] = 1
    time.sleep(0.06)
    cache["b"] = 2  # the first answer has waited past the limit: both are committed
    assert _on_disk(db) == {"a": 1, "b": 2}
    cache.close()


@pytest.fixture(scope="module")
def engine_env():
    s = Settings.from_env()
    if not s.vllm.exists():  # a failure, not a skip: `make setup` builds it
        pytest.fail(f"the engine's environment is not built ({s.vllm.location}); run `make setup`")
    return s


def _in_engine_env(s: Settings, script: str) -> dict:
    head = f"import json, sys\nsys.path.insert(0, {str(WORKERS)!r})\n"
    p = subprocess.run([str(s.vllm.python), "-c", head + textwrap.dedent(script)], capture_output=True, text=True,
                       env={"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "PATH": "/usr/bin:/bin"}, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_sqlitedict_and_the_batched_cache_read_each_others_files(engine_env, tmp_path):
    got = _in_engine_env(engine_env, f"""
        from sqlitedict import SqliteDict
        from lmeval_cache import RequestCache
        old, new = {str(tmp_path / "old.db")!r}, {str(tmp_path / "new.db")!r}
        d = SqliteDict(old, autocommit=True)  # as lm-eval's CachingLM opens it
        d["k1"] = (-1.25, True)
        d.close()
        c = RequestCache(old)
        read_old = [c["k1"], "k1" in c, "k2" in c]
        c["k2"] = (-3.5, False)
        c.close()
        n = RequestCache(new)
        n["k3"] = (-0.75, True)
        n.close()
        d, e = SqliteDict(old), SqliteDict(new)
        print(json.dumps({{"read_old": read_old, "old": sorted(d.items()), "new": sorted(e.items())}}))
        """)
    assert got["read_old"] == [[-1.25, True], True, False]
    assert got["old"] == [["k1", [-1.25, True]], ["k2", [-3.5, False]]]
    assert got["new"] == [["k3", [-0.75, True]]]


def test_templates_compiled_once_render_what_lm_eval_renders(engine_env):
    got = _in_engine_env(engine_env, """
        import lm_eval.utils as utils
        from lmeval_cache import compile_templates_once
        cases = [("{{activity}}: {{input}} ...\\n{% for c in choices %}{{ 'ABCD'[loop.index0] }}. {{c}}\\n{% endfor %}"
                  "Answer:", {"activity": "Baking", "input": "She mixes", "choices": ["x", "y"]}),
                 ("{{ ['A', 'B', 'C', 'D'][:choices|length] }}", {"choices": [1, 2, 3]}),
                 ("{{gold}}", {"gold": 2})]
        before = [utils.apply_template(t, d) for t, d in cases]
        compile_templates_once()
        after = [utils.apply_template(t, d) for t, d in cases for _ in range(2)]
        print(json.dumps({"before": before, "after": after[::2], "again": after[1::2]}))
        """)
    assert got["before"] == got["after"] == got["again"]
    assert got["before"][0] == "Baking: She mixes ...\nA. x\nB. y\nAnswer:"


def test_the_include_path_alone_is_indexed_only_where_it_holds_every_task(engine_env, tmp_path):
    ref = LmEvalSuiteRef(kind="lm_eval", tasks=["oe_arc_easy_mc"], include_path=ROOT / "suites" / "lmeval")
    include = materialize_tasks(ref, engine_env.data, tmp_path)
    got = _in_engine_env(engine_env, f"""
        from lmeval_session import _config, _included_only
        out = {{}}
        for tasks in ("oe_arc_easy_mc,oe_copa", "oe_arc_easy_mc,arc_easy"):  # arc_easy: one of lm-eval's own
            cfg = _config(["--model", "dummy", "--tasks", tasks, "--include_path", {str(include)!r}])
            m = _included_only(cfg)
            out[tasks] = None if m is None else [cfg.tasks, "arc_easy" in m.all_tasks]
        print(json.dumps(out))
        """)
    assert got["oe_arc_easy_mc,oe_copa"] == [["oe_arc_easy_mc", "oe_copa"], False]
    assert got["oe_arc_easy_mc,arc_easy"] is None  # lm-eval's own resolution, its tasks indexed


def test_the_strings_a_loglikelihood_call_tokenizes_are_each_listed_once():
    from qeval.workers.lmeval_next_token import pair_strings

    assert pair_strings([("Q1 Answer:", " A"), ("Q1 Answer:", " B"), ("Q2 Answer: ", "C"), ("", "alone")]) == [
        "Q1 Answer: A", "Q1 Answer:", "Q1 Answer: B", "Q2 Answer: C", "Q2 Answer:", "alone"]


def test_the_next_token_client_tokenizes_in_one_call_what_lm_eval_does_one_string_at_a_time(engine_env, tmp_path):
    """The (context, continuation) token ids the next-token client hands on are lm-eval's own, string for string,
    with a tokenizer that adds a BOS token where asked to (the embedded model's own adds none)."""
    tok = tmp_path / "tokenizer"
    shutil.copytree(engine_env.models / "smollm2-135m-instruct", tok,
                    ignore=lambda d, names: [n for n in names if n.endswith(".safetensors")])
    got = _in_engine_env(engine_env, f"""
        import os
        from tokenizers import Tokenizer
        from tokenizers.processors import TemplateProcessing
        t = Tokenizer.from_file({str(tok / "tokenizer.json")!r})
        bos = t.id_to_token(1)
        t.post_processor = TemplateProcessing(single=bos + " $A", pair=bos + " $A $B", special_tokens=[(bos, 1)])
        t.save({str(tok / "tokenizer.json")!r})
        from lmeval_next_token import register
        register(os.devnull, 5)
        import lm_eval.api.registry
        from lm_eval.models.openai_completions import LocalCompletionsAPI

        class Req:
            def __init__(self, args):
                self.args = args

        pairs = [("Baking: She mixes ...\\nA. x\\nB. y\\nAnswer:", " A"), ("Baking: She mixes ...\\nA. x\\nAnswer:", " B"),
                 ("Q: caf\\u00e9 ?  ", "Answer: \\u00e9t\\u00e9"), ("", "starts alone"), ("x" * 3000, " D")]
        out = {{}}
        for name, cls in (("lm-eval", LocalCompletionsAPI), ("ours", lm_eval.api.registry.get_model("qeval-next-token"))):
            lm = cls(base_url="http://127.0.0.1:9/v1/completions", model="m", tokenizer_backend="huggingface",
                     tokenizer={str(tok)!r}, add_bos_token=True)
            seen = []
            lm._loglikelihood_tokens = lambda reqs, **k: seen.extend(reqs) or [(0.0, True)] * len(reqs)
            lm.loglikelihood([Req(p) for p in pairs], disable_tqdm=True)
            out[name] = [[list(x[0]), x[1], x[2]] for x in seen]
        print(json.dumps(out))
        """)
    assert got["ours"] == got["lm-eval"]
    assert len(got["ours"]) == 5 and all(ctx[0] == 1 and cont for _, ctx, cont in got["ours"])  # the BOS first
