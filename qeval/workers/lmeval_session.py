"""lm-eval kept in one process across calls: the model client and the tasks built once, each call evaluating the
docs it names (runs in the engine venv, never imports qeval).

Usage: python lmeval_session.py PORT [--next-token TOP_K] -- LM_EVAL_ARGUMENTS...

LM_EVAL_ARGUMENTS are lm-eval's own command line (`--model`, `--model_args`, `--tasks`, seeds, few-shot, ...), read
by lm-eval's own parser into its own configuration, as `python -m lm_eval` would. The model client is made and
every task built (its data read) once. The worker then connects to 127.0.0.1:PORT, sends the token it was given
in QEVAL_SESSION_TOKEN (one JSON line), and answers one JSON line per call:

    {"tasks": [...], "samples": {task: [doc index, ...]} | null, "limit": n | null,
     "output_path": dir, "use_cache": path, "flags": path | null}
 -> {"ok": true} | {"ok": false, "error": "..."}

Each call is lm-eval's `simple_evaluate` with the arguments the command line gives, the call's docs, its request
cache and its output folder: the seeds (Python's, NumPy's, torch's and the few-shot sampler's) are set again at
every call, so a call's prompts are those a fresh `lm_eval` process with the same `--samples` makes. Its per-sample
log is written as lm-eval's command line writes it (samples_<task>_<date>.jsonl) before the answer. With
`--next-token`, the model is qeval's next-token client (lmeval_next_token.py) and `flags` its flags file.
The worker exits when the connection closes (its parent is gone or done) or on {"stop": true}.

The request cache's writes are gathered into batches and each task template is compiled once (lmeval_cache.py):
the same answers and prompts, without a disk commit per answer or a Jinja compile per document. Where the include
path holds every task named, only it is indexed (`_included_only`), not lm-eval's thousands of task files too.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import traceback


def _config(rest: list[str]):
    """lm-eval's own configuration of its command line."""
    from lm_eval._cli.harness import HarnessCLI
    from lm_eval.config.evaluate_config import EvaluatorConfig

    sys.argv = ["lm_eval", *rest]
    return EvaluatorConfig.from_cli(HarnessCLI().parse_args())


def _included_only(cfg):
    """lm-eval's task manager over the include path alone, where that path holds every task the command line
    names (the tasks then set on `cfg` as lm-eval's own resolution sets them); None where it does not. lm-eval's
    own resolution indexes its thousands of task files first (seconds at every start) though an include path's
    task of the same name wins over them."""
    from lm_eval.tasks import TaskManager

    names = cfg.tasks.split(",") if isinstance(cfg.tasks, str) else [n for t in cfg.tasks for n in t.split(",")]
    if not cfg.include_path or not names or any(n.endswith(".yaml") or os.path.isdir(n) for n in names):
        return None
    manager = TaskManager(include_path=cfg.include_path, include_defaults=False, metadata=cfg.metadata or {})
    matched = [manager.match_tasks([n]) for n in dict.fromkeys(names)]
    if not all(matched):
        return None
    cfg.tasks = list(dict.fromkeys(t for m in matched for t in m))
    return manager


class Session:
    """The model client and the built tasks of one lm-eval command line, evaluated call by call."""

    def __init__(self, rest: list[str]):
        import lm_eval.api.registry

        os.environ["TOKENIZERS_PARALLELISM"] = "false"  # as lm-eval's command line sets it
        self.cfg = cfg = _config(rest)
        self.built: dict[str, list] = {}
        self.manager = _included_only(cfg)
        if self.manager is not None:
            try:
                for name in cfg.tasks:
                    self._objects(name)
            except Exception:  # noqa: BLE001 - a task that needs lm-eval's own (a group of its tasks): all of them
                self.manager, self.built = None, {}
                cfg = self.cfg = _config(rest)
        if self.manager is None:
            self.manager = cfg.process_tasks(cfg.metadata)
        # simple_evaluate's own construction of a client from a command line's arguments
        self.lm = lm_eval.api.registry.get_model(cfg.model).create_from_arg_obj(
            cfg.model_args, {"batch_size": cfg.batch_size, "max_batch_size": cfg.max_batch_size,
                             "device": cfg.device})
        for name in cfg.tasks:
            self._objects(name)

    def _objects(self, name: str) -> list:
        """A task (or a group, or a tag's tasks) built once: its data read, its few-shot pool kept."""
        if name not in self.built:
            loaded = self.manager.load([name])
            self.built[name] = [loaded["groups"][name]] if name in loaded["groups"] else list(loaded["tasks"].values())
        return self.built[name]

    def evaluate(self, call: dict) -> None:
        from lm_eval import simple_evaluate
        from lm_eval.loggers import EvaluationTracker

        cfg = self.cfg
        if call.get("flags") is not None:
            self.lm.flags_file = call["flags"]
        tracker = EvaluationTracker(output_path=call["output_path"])
        try:
            results = simple_evaluate(
                model=self.lm, model_args=cfg.model_args,
                tasks=[o for name in call["tasks"] for o in self._objects(name)],
                num_fewshot=cfg.num_fewshot, batch_size=cfg.batch_size, max_batch_size=cfg.max_batch_size,
                device=cfg.device, use_cache=call["use_cache"],
                cache_requests=cfg.cache_requests.get("cache_requests", False),
                rewrite_requests_cache=cfg.cache_requests.get("rewrite_requests_cache", False),
                limit=call.get("limit"), samples=call.get("samples"), write_out=cfg.write_out,
                log_samples=cfg.log_samples, evaluation_tracker=tracker, system_instruction=cfg.system_instruction,
                apply_chat_template=cfg.apply_chat_template, fewshot_as_multiturn=cfg.fewshot_as_multiturn,
                gen_kwargs=cfg.gen_kwargs, task_manager=self.manager, predict_only=cfg.predict_only,
                random_seed=cfg.seed[0] if cfg.seed else None, numpy_random_seed=cfg.seed[1] if cfg.seed else None,
                torch_random_seed=cfg.seed[2] if cfg.seed else None,
                fewshot_random_seed=cfg.seed[3] if cfg.seed else None,
                confirm_run_unsafe_code=cfg.confirm_run_unsafe_code, metadata=cfg.metadata)
        finally:  # the call's request cache is closed with it: every answer it got is on disk
            hook = getattr(self.lm, "cache_hook", None)
            db = getattr(hook, "dbdict", None)
            if db is not None:
                db.close()
        if results is None:
            return
        samples = results.pop("samples") if cfg.log_samples else None
        tracker.save_results_aggregated(results=results, samples=samples)
        if samples is not None:
            for task_name in results["configs"]:
                tracker.save_results_samples(task_name=task_name, samples=samples[task_name])


def serve(session: Session, channel: socket.socket) -> None:
    reader = channel.makefile("r", encoding="utf-8")
    for line in reader:
        call = json.loads(line)
        if call.get("stop"):
            return
        try:
            session.evaluate(call)
            answer = {"ok": True}
        except Exception as e:  # noqa: BLE001 - the parent reports it, with this process's log
            traceback.print_exc()
            answer = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        sys.stdout.flush()
        sys.stderr.flush()
        channel.sendall((json.dumps(answer) + "\n").encode())


def main(argv: list[str]) -> None:
    port, rest = int(argv[0]), argv[1:]
    top_k = None
    if rest[:1] == ["--next-token"]:
        top_k, rest = int(rest[1]), rest[2:]
    if rest[:1] == ["--"]:
        rest = rest[1:]
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from lmeval_cache import batch_cache_writes, compile_templates_once

    batch_cache_writes()
    compile_templates_once()
    if top_k is not None:
        from lmeval_next_token import register

        register(os.devnull, top_k)  # each call names its flags file
    session = Session(rest)
    token = os.environ.pop("QEVAL_SESSION_TOKEN", "")
    with socket.create_connection(("127.0.0.1", port)) as channel:
        channel.sendall((json.dumps({"token": token}) + "\n").encode())
        serve(session, channel)


if __name__ == "__main__":
    main(sys.argv[1:])
