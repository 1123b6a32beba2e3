"""The Markdown sign-off summary: overall verdict first, then the evidence behind it."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Protocol

import jinja2

from ..record.run import GateResult, RunRecord, changes_text
from ..record.measurements import Grid, GridCell, ProbeStep, SuiteFlips
from ..verdict.findings import qualifier
from ..verdict.flips import KEEP
from ..verdict.noise import floor_rows, show as show_floor
from ..verdict.savings import savings, short_method, stopped_at

TEMPLATE = """\
# qeval report: {{ r.campaign }}
{% if r.config.get("description") %}
{{ r.config.description }}
{% endif %}
{{ look.overall(r.verdict) }}

| variant | method | verdict | weights | engine RSS | start-up | evaluating | idle (lease wait) |
| --- | --- | --- | --- | --- | --- | --- | --- |
{% for v in r.variants -%}
| {{ v.name }} | {{ v.method }}{{ " (simulated)" if v.recipe.get("simulate") }}{{ " + KV " ~ v.kv_cache_dtype if v.kv_cache_dtype }} | {{ look.badge("baseline" if v.role == "baseline" else "A/A" if v.role == "noise" else r.verdicts.get(v.name, "-")) }} | {{ mib(v.weights_bytes) }} | {{ mib(v.engine_rss_bytes) }} | {{ secs(v.startup_seconds) }} | {{ secs(v.eval_seconds) }} | {{ secs(v.idle_seconds) }}{{ " (" ~ secs(v.lease_wait_seconds) ~ ")" if v.lease_wait_seconds }} |
{% endfor %}
{% for v in r.variants if v.simulated %}
{{ "Simulated (quality judged on the scheme's dequantized weights; weights, memory and speed are the dense model's, so performance rules show nothing; probed only where `probe: {simulated: true}` asks):" if loop.first }}
- {{ v.name }}: {{ v.simulated }}
{% endfor %}
{% set changed = r.variants | selectattr("role", "equalto", "variant") | list %}{% if changed | selectattr("changes") | list or changed | selectattr("perf_not_applicable") | list %}
What each variant changes against the baseline (a performance rule gates the variants whose changes it answers for):

{% for v in changed if v.changes or v.perf_not_applicable -%}
- {{ v.name }}: {{ differs(v.changes, v.serving_diff) }}{% for rule, why in v.perf_not_applicable.items() %}; `{{ rule }}` not applicable ({{ why }}){% endfor %}
{% endfor %}{% endif %}
{% if imported %}
## Source

Not served by qeval: results another evaluator wrote, read as they are, so no performance, probe or grid figures.
Each task was checked to be the same task as the baseline's (its prompt, few-shot and scoring settings), and each
shared item to be asked the same way (its prompt and document hashes).

| variant | evaluator | model as recorded | files |
| --- | --- | --- | --- |
{% for v in imported -%}
| {{ v.name }} | {{ v.imported.evaluator }} {{ v.imported.version or "" }} | {{ v.imported.model or "-" }} | {% for f in v.imported.files %}{{ base(f.path) }} ({{ f.lines }} lines, sha256 {{ f.sha256[:12] }}){{ ", " if not loop.last }}{% endfor %} |
{% endfor %}
{% for v in imported %}{% for suite, t in v.imported.tasks.items() %}{% for k, pair in t.advisory.items() -%}
- {{ v.name }}, {{ suite }}: {{ k }} is {{ short(pair[1]) }}, the baseline's {{ short(pair[0]) }} (shown, not refused)
{% endfor %}{% if t.unpaired -%}
- {{ v.name }}, {{ suite }}: unpaired items ({{ t.unpaired_reason }}): {% for side, ids in t.unpaired.items() %}{{ side }} only: {{ ids | join(", ") }}{{ "; " if not loop.last }}{% endfor %}
{% endif %}{% for side, items in t.dropped.items() %}{% for item, why in items.items() -%}
- {{ v.name }}, {{ suite }}: {{ side }}'s item {{ item }} has no score: {{ why }}
{% endfor %}{% endfor %}{% endfor %}{% endfor %}
{% endif %}
**{{ rec.text() }}**
{% if decided %}
May each variant that changes the KV cache or a serving setting be turned on (its gates, what sets it apart from the baseline, its KV capacity and throughput against the baseline's):

{% for d in decided -%}
- {{ d.text() }}
{% endfor %}{% endif %}

Not evaluated:

{% for line in not_evaluated -%}
- {{ line }}
{% else -%}
- nothing: every variant was evaluated, on every part the campaign asks for
{% endfor %}

## Gates

A gate reads the two-sided (1 - 2 alpha) interval of delta = variant - baseline (oriented so
that positive is better), whose ends are one-sided (1 - alpha) bounds. Non-inferiority passes when
the lower bound is above -margin. A FAIL says which finding it rests on: "worse than the margin"
when even the upper bound is below -margin (the variant is clearly worse), "not shown within the
margin" when the interval straddles -margin (the data cannot tell it from a drop of the margin).
It is INCONCLUSIVE when the suite's minimum detectable effect (MDE, at alpha and power 1 - beta,
from the observed paired variance) exceeds the margin: the suite was too small to tell; one whose
interval already lies inside the margin says so. For 0/1 scores a PASS must also clear an exact
unconditional non-inferiority test (its p in "why"), which holds the false-pass rate at alpha
where the interval is an approximation.
INCONCLUSIVE counts as {{ "a failure" if r.inconclusive == "fail" else "a pass" }} for the exit code.
A variant passes only if all its gates pass (an intersection-union test: no correction is needed
for that verdict).

| variant | suite / metric | mode | baseline | variant | delta | bounds | margin | MDE |{% if saved %} items used / planned |{% endif %} result | why |
| --- | --- | --- | --- | --- | --- | --- | --- | --- |{% if saved %} --- |{% endif %} --- | --- |
{% for g in r.gates -%}
| {{ g.variant }} | {{ g.suite }} / {{ g.metric }} | {{ g.mode }} | {{ pv(g.metric, g.base_mean) if g.mode == "ratio" else f(g.base_mean) }} | {{ pv(g.metric, g.variant_mean) if g.mode == "ratio" else f(g.variant_mean) }} | {{ ("%.3fx" % g.delta) if g.mode == "ratio" and g.delta is not none else s(g.delta) }} | [{{ s(g.lower_bound) }}, {{ s(g.upper_bound) }}] | {{ f(g.margin) }} ({{ g.margin_spec }}) | {{ f(g.mde) }} |{% if saved %} {{ used(g) }} |{% endif %} {{ look.badge(g.verdict, strong=True) }}{% if said(g) %} ({{ said(g) }}){% endif %} | {{ g.reason }} |
{% endfor %}
{{ look.figure("forest") }}
{% if saved %}
**Sequential gates**{% if saved.methods %}, method: {{ saved.methods | join("; ") }}{% endif %}. A variant evaluated
each suite's items in one seeded order, the same for every variant (so the pairs hold at every look), and
stopped once the suite's gates were decided; a gate's bounds are its design's at the look that decided it,
which keeps the false-pass rate at alpha however early it stopped. Items used / planned: the items the
gate's decision read, of the suite's; "-": a fixed-n gate, which read them all. NOT_RUN: a suite skipped
because a gate had already failed the variant (stop_variant_on_fail): not evaluated, never a pass.

{% for v in saved.variants -%}
- {{ v.variant }}: {{ num(v.evaluated) }} of {{ num(v.planned) }} items evaluated, {{ num(v.saved) }} saved{% if v.seconds_saved is not none %} (about {{ dur(v.seconds_saved) }} of engine time, an estimate){% endif %}{% for s in v.suites if s.not_run %}{{ "; not run: " if loop.first else ", " }}{{ s.suite }}{% endfor %}
{% endfor %}
{% endif %}
{% if r.comparisons %}## Every comparison

p: McNemar exact for 0/1 scores, Wilcoxon signed-rank otherwise (a paired sign-flip permutation
p is in the run record too); p ({{ r.multiplicity }}): corrected across all
{{ r.comparisons | length }} comparisons of this campaign. Flips: b = baseline right / variant
wrong, c = baseline wrong / variant right.

| variant | suite / metric | n | delta | interval | method | paired t | flips b / c (rate) | p | p ({{ r.multiplicity }}) |
| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |
{% for c in r.comparisons -%}
| {{ c.variant }} | {{ c.suite }} / {{ c.metric }} | {{ c.n_paired }}{% if c.unpaired_base or c.unpaired_variant %} ({{ c.unpaired_base }}+{{ c.unpaired_variant }} unpaired){% endif %} | {{ s(c.delta) }} | [{{ s(c.ci_low) }}, {{ s(c.ci_high) }}] ({{ "%.0f" % (100 * c.confidence) }}%) | {{ c.interval_method }} | [{{ s(c.t_ci_low) }}, {{ s(c.t_ci_high) }}] | {% if c.binary %}{{ c.flips_base_only }} / {{ c.flips_variant_only }} ({{ "%.1f" % (100 * c.flip_rate) }}%){% else %}-{% endif %} | {{ p(c.p_value) }} | {{ p(c.p_adjusted) }} |
{% endfor %}
{% set grouped = r.comparisons | selectattr("n_groups") | list %}{% if grouped %}
Items in groups (cluster-robust interval); how each planned MDE counts them:
{% for c in grouped %}
- {{ c.variant }}, {{ c.suite }} / {{ c.metric }}: {{ c.n_groups }} groups; {{ c.power_method }}
{%- endfor %}
{% endif %}
{% else %}No quality comparison: this campaign ran no suite (speed and memory only).
{% endif %}
{% if differ %}
## How variants of one method differ

{% for line in differ -%}
- {{ line }}
{% endfor %}
{% endif %}
{% if nf %}
## Noise floor (A/A)

{% if imported | selectattr("name", "equalto", nf.variant) | list -%}
The baseline evaluated a second time ({{ nf.variant }}): the same model's results from a second run of its
evaluator, imported as the baseline's were. What differs between the two is the serving's own noise (another run,
another batch), the floor under any variant's disagreement with the baseline. A variant "within" the
{%- else -%}
The baseline evaluated a second time ({{ nf.variant }}): the same weights, by a second server, with
{{ nf.concurrency }} request{{ "s" if nf.concurrency > 1 else "" }} in flight for every suite (the first evaluation:
{% for suite, c in nf.baseline_concurrency.items() %}{{ suite }} {{ c }}{{ "; " if not loop.last else "" }}{% endfor %}).
What differs between the two is the engine's own noise (another batch: the floating-point sums run in
another order), the floor under any variant's disagreement with the baseline. A variant "within" the
{%- endif %}
floor disagrees with the baseline no more than the baseline does with itself (point figures): its
flips there are as well explained by that noise as by its quantization.

| suite / metric | figure | A/A (n) |{% for v in floor_variants %} {{ v }} |{% endfor %}
| --- | --- | --- |{% for v in floor_variants %} --- |{% endfor %}
{% for fig, cells in floor_rows -%}
| {{ fig.suite }} / {{ fig.metric }} | {{ fig.figure }} | {{ show(fig.figure, fig.value) }} ({{ fig.n }}) |{% for c in cells %} {{ c }} |{% endfor %}
{% endfor %}
{% for w in nf.within -%}
- **{{ w.variant }}**, {{ w.suite }} / {{ w.metric }}: {{ w.figure }} {{ show(w.figure, w.value) }}, within the noise floor ({{ show(w.figure, w.floor) }})
{% endfor %}
{% endif %}
{% if flipped %}
## Flipped items

What changed, item by item: for a suite's 0/1 primary metric, "lost" items the baseline got right and the
variant wrong, "gained" the reverse (McNemar's b and c above); for a logprobs suite, the chunks with the
largest KL. The first {{ keep }} of each here; all of them in `flips.parquet` beside this report and in each
variant's MLflow run (`flips.json`).
{% for v in r.variants if v.flips %}{% for suite, fl in v.flips.items() %}
{{ look.flips(v.name, suite, fl) }}
{% endfor %}{% endfor %}
{% endif %}
{% if dist %}
## Next-token distributions

Prompt log-probabilities of a held-out text corpus, token by token, against the baseline's on the
same tokens. KL divergence is computed from the top-k log-probabilities the server returns, with
the rest of the mass in one tail bucket: an approximation (close to a lower bound of the full KL).
Delta-p: the change in the probability of the baseline's most likely token.

| variant | suite | perplexity | tokens | KL mean | KL median | KL p95 | KL p99 | top-1 agreement | delta-p mean | delta-p median | delta-p p01 / p99 | chunks (mismatched) |
| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |
{% for v in r.variants -%}
{% for suite, d in v.distribution.items() -%}
| {{ v.name }} | {{ suite }} | {{ "%.2f" % d.perplexity }} | {{ d.tokens | default("-") }} | {{ f(d.kl_mean | default(none)) }} | {{ f(d.kl_median | default(none)) }} | {{ f(d.kl_p95 | default(none)) }} | {{ f(d.kl_p99 | default(none)) }} | {{ f(d.top1_agreement | default(none)) }} | {{ s(d.delta_p_mean | default(none)) }} | {{ s(d.delta_p_median | default(none)) }} | {{ s(d.delta_p_p01 | default(none)) }} / {{ s(d.delta_p_p99 | default(none)) }} | {{ d.chunks }}{% if d.mismatched_chunks | default(0) %} ({{ d.mismatched_chunks }} with different tokens: excluded){% endif %} |
{% endfor -%}
{% endfor %}
{% endif %}
{% if strata %}
## KL by depth

Long documents scored token by token, each depth bucket (token positions lo to hi) compared on its own:
the variant's mean KL against the baseline and its top-1 agreement there, and the NLL of each side (delta:
the variant's less the baseline's, positive worse). Damage that grows with depth shows as KL rising down
the table. A bucket too few documents or tokens reach is not judged (its gate is INCONCLUSIVE).

| variant | suite | depth (tokens) | documents | tokens | KL mean | top-1 agreement | NLL baseline | NLL variant | delta NLL | note |
| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |
{% for v in r.variants -%}
{% for suite, st in v.strata.items() if st.axis == "depth" -%}
{% for c in st.cells -%}
| {{ v.name }} | {{ suite }} | {{ c.lo }}-{{ c.hi }} | {{ c.documents }} | {{ c.tokens }} | {{ f(c.kl) }} | {{ f(c.top1) }} | {{ f(c.base) }} | {{ f(c.variant) }} | {{ s(c.delta) }} | {{ c.insufficient or "" }} |
{% endfor -%}
{% endfor -%}
{% endfor %}
{{ look.figure("depth") }}
{% endif %}
{% if needles %}
## Retrieval at length

Needles (a 7-digit code under a two-word key) at several depths of haystacks of several lengths, each prompt
exact in the engine's tokens; an item scores 1 where the answer holds the code. Per prompt length (rows) and
depth (columns: where the needle lies in the filler, 0 its start, 1 its end), the baseline's accuracy and the
variant's (baseline -> variant). The depths of one haystack share its filler, so the gates' statistics are
clustered by haystack; a length whose baseline finds fewer than half its needles says little of a variant.

{% for v, suite, st in needles -%}
**{{ v.name }}**, {{ suite }}:

{{ needle_table(st) }}

{% endfor -%}
{{ look.figure("needle") }}
{% endif %}
{% if probed %}
## Performance

Latency probe on each variant's own server, after its suites: streaming completions with random
token prompts, fixed output length (ignore_eos); TTFT to the first token, TPOT excluding it (as
vLLM defines it), E2E per request. Client CPU: the probe's own CPU seconds per wall second.

| variant | weights on disk | weights loaded | engine RSS | engine GPU | KV cache | max output tok/s | saturation (concurrency) | within SLO | TTFT p50 @1 | TPOT p50 @1 |
| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |
{% for v in r.variants if v.probe -%}
{% set pf = v.perf() -%}
| {{ v.name }} | {{ mib(v.weights_bytes) }} | {{ mib(v.model_memory_bytes) }}{{ per_gpu(v, v.model_memory_bytes) }} | {{ mib(v.engine_rss_bytes) }} | {{ mib(v.engine_gpu_bytes) }}{{ per_gpu(v, v.engine_gpu_bytes) }} | {{ mib(v.kv_cache_bytes) }}{{ per_gpu(v, v.kv_cache_bytes) }}{% if v.kv_cache_tokens %} ({{ "{:,}".format(v.kv_cache_tokens) }} tokens){% endif %} | {{ n(pf.get("max_output_throughput"), ".1f") }} | {{ v.probe.saturation_concurrency if v.probe.saturation_concurrency is not none else "not reached" }} | {{ v.probe.max_concurrency_within_slo if v.probe.max_concurrency_within_slo is not none else "-" }} | {{ n(pf.get("ttft_p50_ms_c1"), ".1f") }} ms | {{ n(pf.get("tpot_p50_ms_c1"), ".1f") }} ms |
{% endfor %}
{{ look.figure("tradeoff") }}

| variant | load | requests (errors) | output tok/s | goodput (req/s) | TTFT p50 / p95 / p99 (ms) | TPOT p50 / p95 (ms) | ITL p95 (ms) | E2E p50 / p95 (ms) | client CPU |
| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |
{% for v in r.variants if v.probe -%}
{% for st in v.probe.steps -%}
| {{ v.name }} | {{ st.kind }} {{ st.load }} | {{ st.requests }} ({{ st.errors }}) | {{ n(st.output_throughput, ".1f") }} | {{ n(st.goodput, ".2f") if st.goodput is not none else "-" }} | {{ n(st.ttft_ms.p50, ".0f") }} / {{ n(st.ttft_ms.p95, ".0f") }} / {{ n(st.ttft_ms.p99, ".0f") }} | {{ n(st.tpot_ms.p50, ".1f") }} / {{ n(st.tpot_ms.p95, ".1f") }} | {{ n(st.itl_ms.p95, ".1f") }} | {{ n(st.e2e_ms.p50, ".0f") }} / {{ n(st.e2e_ms.p95, ".0f") }} | {{ "%.0f" % (100 * st.client_cpu_share) }}% |
{% endfor -%}
{% endfor %}
{% for v in r.variants if v.probe and v.probe.warmup and v.probe.warmup.concurrency %}
{% set w = v.probe.warmup -%}
{{ "Warm-up before the figures (requests not counted):" if loop.first }}
- {{ v.name }}: {{ w.requests }} requests in {{ "%.0f" % w.seconds }} s; rounds at concurrency {{ w.concurrency }}: {{ w.rounds_tok_s | map("round", 1) | join(" -> ") }} tok/s, {{ "steady" if w.steady else "**not steady** when its time ran out: its first figures may be a warming server's" }}
{% endfor %}
{{ look.figure("latency") }}
{% if served_view %}
### The server's view at each load

From each engine's own Prometheus `/metrics`: means over the step's requests (the difference
between readings just before and just after the step) and gauges read about every 0.5 s during it.
Server queue: from the engine receiving a request to scheduling it; server TTFT counts from the
engine receiving it, so client TTFT minus server TTFT is HTTP, tokenization and the client's own
delay. KV cache: the share of the cache in use (1 = full). "-": not served by that engine (TGI has
no per-request TTFT, prefill or decode time, nor a KV-cache gauge).
{% for v in r.variants if v.probe and served(v) %}

**{{ v.name }}**{% if v.engine %} ({{ v.engine }}){% endif %}

| load | client TTFT mean / p50 / p95 (ms) | server queue mean (ms) | server TTFT mean (ms) | server prefill / decode mean (ms) | running mean / max | waiting mean / max | KV cache mean / max | requests (server / client) |
| --- | --- | --- | --- | --- | --- | --- | --- | --- |
{% for st in v.probe.steps -%}
| {{ st.kind }} {{ st.load }} | {{ n(st.ttft_ms.mean, ".0f") }} / {{ n(st.ttft_ms.p50, ".0f") }} / {{ n(st.ttft_ms.p95, ".0f") }} | {{ sv(st, "queue_mean_ms", ".0f") }} | {{ sv(st, "ttft_mean_ms", ".0f") }} | {{ sv(st, "prefill_mean_ms", ".0f") }} / {{ sv(st, "decode_mean_ms", ".0f") }} | {{ sv(st, "running_mean", ".1f") }} / {{ sv(st, "running_max", ".0f") }} | {{ sv(st, "waiting_mean", ".1f") }} / {{ sv(st, "waiting_max", ".0f") }} | {{ sv(st, "kv_cache_usage_mean", ".3f") }} / {{ sv(st, "kv_cache_usage_max", ".3f") }} | {{ sv(st, "requests", ".0f") }} / {{ st.requests }} |
{% endfor -%}
{% endfor %}
{% endif %}
{% for v in r.variants if v.probe and not served(v) and note(v) %}
- {{ v.name }}: no server-side figures ({{ note(v) }})
{% endfor %}
{% endif %}
{% if gridded %}
## Batch size x concurrency

Each row is a server started with that engine setting (one start per variant and setting; the
setting a variant is configured with runs on its evaluation server, after its suites and probe), each
column a client concurrency: one latency-probe step there, with the probe's prompt and output
lengths. Best: the most output tokens/s among the cells with no errors that meet the SLOs. The
heat map of each grid is `grid-<variant>.png` beside this report (inline in report.html).
{% for v in r.variants if v.grid %}

**{{ v.name }}**: best under the SLOs ({{ g_slo(v.grid) }}): {{ g_best(v.grid) }}

| output tok/s | {% for k in v.grid.concurrency %}c={{ k }} | {% endfor %}
| --- | {% for k in v.grid.concurrency %}--- | {% endfor %}
{% for row in v.grid.rows -%}
| {{ row }}{{ " (evaluation server)" if row in v.grid.served and v.grid.served[row].on_server else "" }} | {% for k in v.grid.concurrency %}{{ g_cell(v.grid, row, k) }} | {% endfor %}
{% endfor %}

| setting | concurrency | requests (errors) | output tok/s | TTFT p95 / p99 (ms) | TPOT p95 / p99 (ms) | server queue mean (ms) | server TTFT mean (ms) | running max | KV cache use max | engine RSS | KV cache | meets SLO |
| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |
{% for c in v.grid.cells -%}
| {{ c.row }} | {{ c.concurrency }} | {{ c.requests }} ({{ c.errors }}) | {{ n(c.output_throughput, ".1f") }} | {{ n(c.ttft_ms.p95, ".0f") }} / {{ n(c.ttft_ms.p99, ".0f") }} | {{ n(c.tpot_ms.p95, ".1f") }} / {{ n(c.tpot_ms.p99, ".1f") }} | {{ sv(c, "queue_mean_ms", ".0f") }} | {{ sv(c, "ttft_mean_ms", ".0f") }} | {{ sv(c, "running_max", ".0f") }} | {{ sv(c, "kv_cache_usage_max", ".3f") }} | {{ mib(c.memory.rss_bytes) }} | {{ mib(c.memory.kv_cache_bytes) }} | {{ g_mark(v.grid, c) }} |
{% endfor -%}
{% for row, err in v.grid.errors.items() %}
- {{ row }}: no cells ({{ err }})
{% endfor %}
{{ look.figure("grid", v) }}
{% endfor %}
{% endif %}
## Scores per suite

| variant | {% for s in suites %}{{ s }} | {% endfor %}
| --- | {% for s in suites %}--- | {% endfor %}
{% for v in r.variants -%}
| {{ v.name }} | {% for s in suites %}{{ score(v, s) }} | {% endfor %}
{% endfor %}
{% for v in r.variants if v.concurrency %}{% if loop.first %}Requests in flight per suite (a suite set to `auto`: sized from the engine's KV cache and max_num_seqs):

{% endif %}- {{ v.name }}: {% for s, c in v.concurrency.items() %}{{ s }} {{ c }}{{ "; " if not loop.last else "" }}{% endfor %}{% if v.max_num_seqs %} (its engine: max_num_seqs {{ v.max_num_seqs }}{% if v.kv_cache_tokens %}, KV cache {{ "{:,}".format(v.kv_cache_tokens) }} tokens{% endif %}){% endif %}
{% endfor %}
{% if not probed %}{{ look.figure("tradeoff") }}
{% endif %}
## Provenance

- run id: `{{ r.run_id }}`; config: `{{ r.config_file }}` (hash `{{ r.config_hash }}`)
- started {{ r.started_at }}, finished {{ r.finished_at or "(unfinished)" }}
- command: `{{ r.command | join(" ") }}`
{% for k, val in r.environment.items() -%}
- {{ k }}: {{ val }}
{% endfor %}
{% for v in r.variants -%}
- {{ v.name }}: checkpoint `{{ v.checkpoint }}` (sha256 prefix `{{ (v.checkpoint_hash or "-")[:16] }}`){% if v.recipe %}, recipe {{ v.shown_recipe() }}{% endif %}{% if v.scheme %}; its config declares {{ v.scheme.get("scheme", "") }} ({% for k, x in v.scheme.items() if k != "scheme" %}{{ k }} {{ x }}{{ ", " if not loop.last }}{% endfor %}){% endif %}{% if v.quantize_seconds %}, made in {{ v.quantize_seconds }} s{% endif %}{% if v.dtype %}; {{ v.dtype }} ({{ v.dtype_reason }}){% endif %}{% if v.kv_cache_dtype %}; KV cache {{ v.kv_cache_dtype }}{% endif %}
{% endfor %}
"""

SUMMARY = """\
### qeval {{ r.campaign }}: {{ r.verdict }}

| variant | verdict | gates passed | failing gates |
| --- | --- | --- | --- |
{% for name, v in r.verdicts.items() -%}
{% set gs = r.gates | selectattr("variant", "equalto", name) | list -%}
{% set skipped = gs | selectattr("verdict", "equalto", "NOT_RUN") | list | length -%}
| {{ name }} | **{{ v }}** | {{ gs | selectattr("verdict", "equalto", "PASS") | list | length }} / {{ gs | length }}{% if skipped %} ({{ skipped }} not run){% endif %} | {% for g in gs if g.verdict in ("FAIL", "INCONCLUSIVE") %}{{ g.suite }}/{{ g.metric }}: {{ stopped(g, r.inconclusive) }} (delta {{ s(g.delta) }}, bound {{ s(g.lower_bound) }}, margin {{ f(g.margin) }}){% if not loop.last %}; {% endif %}{% endfor %} |
{% endfor %}

{% if saved -%}
Items saved by stopping early: {{ num(saved.saved) }} of {{ num(saved.planned) }} planned ({{ num(saved.evaluated) }} evaluated){% if saved.seconds_saved is not none %}; engine time saved: about {{ dur(saved.seconds_saved) }} (an estimate: each variant's evaluation seconds per item it served, times its items saved){% endif %}.

{% endif -%}
{{ rec.text() }}
{% for d in decided %}{{ "\n" if loop.first }}- {{ d.text() }}
{% endfor %}"""


# a shape beside the word, so that a verdict reads the same printed in black and white
SHAPES = {"PASS": "\u2714", "FAIL": "\u2718", "INCONCLUSIVE": "?", "WARN": "!", "NOT_EVALUATED": "\u25cb",
          "NOT_RUN": "\u2013", "baseline": "\u25cf"}


class Look(Protocol):
    """How the report's text marks verdicts and where its figures go: plain Markdown, or HTML (html.py)."""

    def overall(self, verdict: str) -> str: ...

    def badge(self, verdict: str, strong: bool = False) -> str: ...

    def figure(self, name: str, variant=None) -> str: ...

    def flips(self, variant: str, suite: str, f: SuiteFlips) -> str: ...


def flip_heading(variant: str, suite: str, f: SuiteFlips) -> str:
    if f.kind == "chunks":
        return f"{variant}, {suite}: the {len(f.rows)} of {f.n} chunks with the largest KL"
    rate = f" ({100 * (f.lost + f.gained) / f.n:.1f}% flipped)" if f.n else ""
    return f"{variant}, {suite} ({f.metric}): {f.lost} lost, {f.gained} gained of {f.n}{rate}"


def _cell(text: str | None) -> str:
    """A response in one Markdown table cell: one line, no column breaks."""
    return "-" if text is None else text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " \u21b5 ")


def flip_table(f: SuiteFlips) -> str:
    if f.kind == "chunks":
        rows = [f"| {r.item_id} | {_fmt(r.kl, '.4f')} | {_fmt(r.top1, '.3f')} |" for r in f.rows]
        return "\n".join(["| chunk | KL | top-1 agreement |", "| --- | --- | --- |", *rows])
    rows = [f"| {r.item_id} | {r.direction} | {_cell(r.target)} | {_cell(r.base_response)} | {_cell(r.variant_response)} |"
            for r in f.rows]
    return "\n".join(["| item | direction | reference | baseline's answer | variant's answer |",
                      "| --- | --- | --- | --- | --- |", *rows])


class MarkdownLook:
    def overall(self, verdict: str) -> str:
        return f"**Overall verdict: {verdict}**"

    def badge(self, verdict: str, strong: bool = False) -> str:
        word = f"**{verdict}**" if strong else verdict
        return f"{SHAPES[verdict]} {word}" if verdict in SHAPES else word

    def figure(self, name: str, variant=None) -> str:
        return ""  # the figures are in report.html (and MLflow's plots/); grid-<variant>.png lies beside the report

    def flips(self, variant: str, suite: str, f: SuiteFlips) -> str:
        return f"**{flip_heading(variant, suite, f)}**\n\n" + (flip_table(f) if f.rows else "nothing flipped")


def not_evaluated(r: RunRecord) -> list[str]:
    """What the campaign did not measure: variants cut short, and whole parts it never ran."""
    out = [f"**{v.name} was not evaluated**: {(v.error or v.status).splitlines()[0]}" for v in r.variants if v.status != "ok"]
    if any(v.imported for v in r.variants):
        out.append("latency, throughput and memory: the variants were not served by qeval (results another "
                   "evaluator wrote)")
        return out
    if not r.config.get("suites"):
        out.append("quality: no suite ran (speed and memory only)")
    if not any(v.probe for v in r.variants):
        out.append("latency and throughput: no probe ran (probe.enabled is off), so no throughput at the SLO")
    return out


def _short(v: object) -> str:
    text = json.dumps(v, sort_keys=True, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def _mib(b: int | None) -> str:
    return "-" if b is None else f"{b / 2**20:,.0f} MiB"


def _per_gpu(v, b: int | None) -> str:
    """After a memory total of a variant served on several GPUs: how many, and each one's share."""
    return "" if b is None or not v.gpus or v.gpus < 2 else f" over {v.gpus} GPUs ({b / v.gpus / 2**20:,.0f} MiB each)"


def perf_value(metric: str, x: float | None) -> str:
    """A performance figure in its unit: bytes as MiB / GiB, the rest with thousands separators."""
    if x is None:
        return "-"
    if metric.endswith("_bytes"):
        return f"{x / 2**30:,.2f} GiB" if x >= 2**30 else f"{x / 2**20:,.0f} MiB"
    return f"{x:,.1f}" if abs(x) >= 100 else f"{x:.3g}"


def duration(seconds: float) -> str:
    """Seconds as a person reads them: "42.0 s", "3.5 min", "2.1 h"."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min" if seconds < 3600 else f"{seconds / 3600:,.1f} h"


def items_cell(g: GateResult) -> str:
    """The gates table's "items used / planned" cell: "100 / 400 (gsd)"; "-" for a fixed-n gate."""
    if g.verdict == "NOT_RUN":
        return "none (not run)"
    if g.sequential is None or g.items_used is None or g.items_planned is None:
        return "-"
    return f"{g.items_used:,} / {g.items_planned:,} ({short_method(g)})"


def needle_table(st) -> str:
    """A needle suite's cells as a Markdown table: a row per prompt length, a column per depth, each cell the
    baseline's accuracy -> the variant's; a length where the baseline finds fewer than half its needles is marked
    (the model cannot retrieve there: the variant's figures say little)."""
    lengths, depths, at = st.grid()
    lines = ["| length (tokens) | " + " | ".join(f"depth {d:g}" for d in depths) + " | items per cell | note |",
             "| --- |" + " --- |" * (len(depths) + 2)]
    for n in lengths:
        row = [at.get((n, d)) for d in depths]
        cells = [c for c in row if c is not None]
        shown = ["-" if c is None else f"{_fmt(c.base, '.3f')} -> {_fmt(c.variant, '.3f')}"
                 + (f" ({_fmt(c.delta, '+.3f')})" if c.delta else "") for c in row]
        bases = [c.base for c in cells if c.base is not None]
        note = "baseline finds fewer than half: not informative" if bases and sum(bases) / len(bases) < 0.5 else ""
        lines.append(f"| {n:,} | " + " | ".join(shown) + f" | {cells[0].items if cells else '-'} | {note} |")
    return "\n".join(lines)


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def _grid_helpers() -> dict:
    def g_cell(g: Grid, row: str, k: int) -> str:
        c = next((c for c in g.cells if (c.row, c.concurrency) == (row, k)), None)
        if c is None:
            return "-"
        if g.is_best(row, k):
            return f"**{c.output_throughput:.1f} (best)**"
        return f"{c.output_throughput:.1f}" + ("" if c.meets_slo(g.slo) else " (misses SLO)")

    def g_mark(g: Grid, c: GridCell) -> str:
        return "**best**" if g.is_best(c.row, c.concurrency) else ("yes" if c.meets_slo(g.slo) else "no")

    def g_best(g: Grid) -> str:
        b = g.best
        return "no cell meets them" if not b else (f"{b.row} at concurrency {b.concurrency}, "
                                                    f"{b.output_throughput:.1f} output tok/s")

    def g_slo(g: Grid) -> str:
        return ", ".join(f"{k} <= {val:g}" for k, val in g.slo.items()) or "none given: any error-free cell"

    return {"g_cell": g_cell, "g_mark": g_mark, "g_best": g_best, "g_slo": g_slo}


@functools.cache
def _compiled(template: str) -> jinja2.Template:
    # compiling the report's template takes longer than rendering it, and a run renders it twice (Markdown, HTML)
    return jinja2.Environment(undefined=jinja2.StrictUndefined).from_string(template)


def _render(template: str, r: RunRecord, look: Look | None = None) -> str:
    from ..verdict.decision import for_record as decisions
    from ..verdict.recommend import for_record
    from .differences import differences

    suites = sorted({s.suite for v in r.variants for s in v.suites})

    def score(v, suite: str) -> str:
        s = next((x for x in v.suites if x.suite == suite), None)
        if s is None:
            return "not run" if suite in v.not_run else "-"
        of = f" of {s.planned}" if s.planned is not None else ""  # sequential gates stopped it early
        return f"{s.means[s.primary]:.3f} ({s.primary}, n={s.n}{of})"

    def served(v) -> bool:  # the engine's /metrics gave figures for at least one probe step
        return any(st.server for st in (v.probe.steps if v.probe else []))

    def note(v) -> str:
        return next((st.server_note for st in v.probe.steps if st.server_note), "")

    def sv(st: ProbeStep | GridCell, key: str, spec: str) -> str:
        x = st.server.get(key)
        return "-" if x is None or x != x else format(x, spec)

    nf = r.noise_floor
    floor_variants = [v.name for v in r.variants if v.role == "variant"]
    return _compiled(template).render(
        nf=nf, floor_variants=floor_variants, show=show_floor, differ=differences(r.variants), differs=changes_text,
        floor_rows=floor_rows(nf.figures, r.comparisons, nf.within, floor_variants) if nf else [],
        gridded=any(v.grid for v in r.variants), **_grid_helpers(),
        flipped=any(v.flips for v in r.variants), keep=KEEP,
        saved=savings(r), used=items_cell, stopped=stopped_at, dur=duration, num=lambda k: f"{k:,}",
        said=lambda g: qualifier(g, r.inconclusive),  # beside a gate's verdict: "worse than the margin"
        served=served, note=note, sv=sv, served_view=any(served(v) for v in r.variants),
        imported=[v for v in r.variants if v.imported], base=lambda p: Path(p).name, short=_short,
        r=r, look=look or MarkdownLook(), rec=for_record(r), decided=decisions(r), not_evaluated=not_evaluated(r), suites=suites, probed=any(v.probe for v in r.variants), dist=any(v.distribution for v in r.variants), strata=any(st.axis == "depth" for v in r.variants for st in v.strata.values()),
        needle_table=needle_table, needles=[(v, suite, st) for v in r.variants for suite, st in sorted(v.strata.items())
                 if st.axis == "length x depth" and st.cells], score=score, mib=_mib, per_gpu=_per_gpu, secs=lambda x: _fmt(x, ".0f") + (" s" if x is not None else ""),
        # a step whose every request failed has no percentiles (NaN, saved as null): "-", not a crash
        n=lambda x, spec: "-" if x is None or x != x else format(x, spec),
        pv=perf_value, f=lambda x: _fmt(x, ".3f"), s=lambda x: _fmt(x, "+.3f"), p=lambda x: _fmt(x, ".3g"))


def render(r: RunRecord, look: Look | None = None) -> str:
    return _render(TEMPLATE, r, look)


def render_summary(r: RunRecord) -> str:
    """A short table for a CI job's summary page."""
    return _render(SUMMARY, r)


def write(r: RunRecord, path: Path) -> Path:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(render(r))
    tmp.replace(path)
    return path
