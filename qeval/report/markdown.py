"""The Markdown sign-off summary: overall verdict first, then the evidence behind it."""

from __future__ import annotations

from pathlib import Path

import jinja2

from ..record import RunRecord

TEMPLATE = """\
# qeval report: {{ r.campaign }}

**Overall verdict: {{ r.verdict }}**

| variant | method | verdict | weights | engine RSS | start-up |
| --- | --- | --- | --- | --- | --- |
{% for v in r.variants -%}
| {{ v.name }} | {{ v.method }} | {{ "baseline" if v.role == "baseline" else r.verdicts.get(v.name, "-") }} | {{ mib(v.weights_bytes) }} | {{ mib(v.engine_rss_bytes) }} | {{ secs(v.startup_seconds) }} |
{% endfor %}
{% for v in r.variants if v.status != "ok" %}
- **{{ v.name }} was not evaluated**: {{ v.error.splitlines()[0] }}
{% endfor %}
## Gates

Non-inferiority: a gate passes when the one-sided (1-alpha) lower confidence bound of
delta = variant - baseline (paired bootstrap, {{ r.config.gates.bootstrap_resamples }} resamples, seed {{ r.config.gates.seed }}) lies above -margin.

| variant | suite / metric | baseline | variant | delta | lower bound | margin | alpha | result |
| --- | --- | --- | --- | --- | --- | --- | --- | --- |
{% for g in r.gates -%}
{% set c = comp(g) -%}
| {{ g.variant }} | {{ g.suite }} / {{ g.metric }} | {{ f(c.base_mean) }} | {{ f(c.variant_mean) }} | {{ s(g.delta) }} | {{ s(g.lower_bound) }} | -{{ f(g.margin) }} ({{ g.margin_spec }}) | {{ g.alpha }} | **{{ g.verdict }}** |
{% endfor %}
## Every comparison

p: McNemar exact for 0/1 scores, Wilcoxon signed-rank otherwise; p (Holm): adjusted across all
{{ r.comparisons | length }} comparisons of this campaign. Flips: b = baseline right / variant wrong,
c = baseline wrong / variant right.

| variant | suite / metric | n | delta | {{ "%.0f" % (100 * conf) }}% CI (bootstrap) | {{ "%.0f" % (100 * conf) }}% CI (paired t) | flips b / c | p | p (Holm) |
| --- | --- | --- | --- | --- | --- | --- | --- | --- |
{% for c in r.comparisons -%}
| {{ c.variant }} | {{ c.suite }} / {{ c.metric }} | {{ c.n_paired }}{% if c.unpaired_base or c.unpaired_variant %} ({{ c.unpaired_base }}+{{ c.unpaired_variant }} unpaired){% endif %} | {{ s(c.delta) }} | [{{ s(c.ci_low) }}, {{ s(c.ci_high) }}] | [{{ s(c.t_ci_low) }}, {{ s(c.t_ci_high) }}] | {% if c.binary %}{{ c.flips_base_only }} / {{ c.flips_variant_only }}{% else %}-{% endif %} | {{ p(c.p_value) }} | {{ p(c.p_adjusted) }} |
{% endfor %}
## Scores per suite

| variant | {% for s in suites %}{{ s }} | {% endfor %}
| --- | {% for s in suites %}--- | {% endfor %}
{% for v in r.variants -%}
| {{ v.name }} | {% for s in suites %}{{ score(v, s) }} | {% endfor %}
{% endfor %}
## Provenance

- run id: `{{ r.run_id }}`; config: `{{ r.config_file }}` (hash `{{ r.config_hash }}`)
- started {{ r.started_at }}, finished {{ r.finished_at or "(unfinished)" }}
- command: `{{ r.command | join(" ") }}`
{% for k, val in r.environment.items() -%}
- {{ k }}: {{ val }}
{% endfor %}
{% for v in r.variants -%}
- {{ v.name }}: checkpoint `{{ v.checkpoint }}` (sha256 prefix `{{ (v.checkpoint_hash or "-")[:16] }}`){% if v.recipe %}, recipe {{ v.recipe }}{% endif %}{% if v.quantize_seconds %}, made in {{ v.quantize_seconds }} s{% endif %}
{% endfor %}
"""


def _mib(b: int | None) -> str:
    return "-" if b is None else f"{b / 2**20:,.0f} MiB"


def render(r: RunRecord) -> str:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, trim_blocks=False, lstrip_blocks=False)
    suites = sorted({s.suite for v in r.variants for s in v.suites})

    def score(v, suite: str) -> str:
        s = next((x for x in v.suites if x.suite == suite), None)
        return "-" if s is None else f"{s.means[s.primary]:.3f} ({s.primary}, n={s.n})"

    def comp(g):
        return next(c for c in r.comparisons if (c.variant, c.suite, c.metric) == (g.variant, g.suite, g.metric))

    conf = r.comparisons[0].confidence if r.comparisons else 0.9
    return env.from_string(TEMPLATE).render(
        r=r, suites=suites, score=score, comp=comp, conf=conf, mib=_mib,
        secs=lambda x: "-" if x is None else f"{x:.0f} s", f=lambda x: f"{x:.3f}", s=lambda x: f"{x:+.3f}",
        p=lambda x: "-" if x is None else f"{x:.3g}")


def write(r: RunRecord, path: Path) -> Path:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(render(r))
    tmp.replace(path)
    return path
