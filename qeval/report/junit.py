"""JUnit XML for CI: one test case per gate, so a CI page lists each gate's result and reason. A failure's type
is the gate's finding and its message says it in words ("FAIL (worse than the margin)" or "FAIL (not shown
within the margin)"). A gate whose suite was not run (NOT_RUN), or that had nothing to judge (NOT_EVALUATED), is a skipped case,
never a pass; a sequential
gate carries where it stopped (items used, of planned) and its method, as properties and in its output."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from ..record.run import RunRecord
from ..verdict.findings import label
from ..verdict.savings import savings, stopped_at


def render(r: RunRecord) -> str:
    suites = ET.Element("testsuites", name=f"qeval {r.campaign}")
    by_variant: dict[str, list] = {}
    for g in r.gates:
        by_variant.setdefault(g.variant, []).append(g)
    saved = {s.variant: s for s in savings(r).variants}
    for v in r.variants:
        if v.role != "variant":  # the baseline, and its A/A (qeval/verdict/noise.py): nothing gated
            continue
        gates = by_variant.get(v.name, [])
        failing = [g for g in gates if g.verdict == "FAIL" or (g.verdict == "INCONCLUSIVE" and r.inconclusive == "fail")]
        skipped = [g for g in gates if g.verdict in ("NOT_RUN", "NOT_EVALUATED")]
        ts = ET.SubElement(suites, "testsuite", name=f"{r.campaign}/{v.name}", tests=str(max(len(gates), 1)),
                           failures=str(len(failing)), errors="1" if v.status != "ok" else "0",
                           skipped=str(len(skipped)))
        if v.name in saved:  # the variant's items over its sequential and skipped suites
            props = ET.SubElement(ts, "properties")
            for name, value in (("items_evaluated", saved[v.name].evaluated), ("items_planned", saved[v.name].planned),
                                ("items_saved", saved[v.name].saved)):
                ET.SubElement(props, "property", name=name, value=str(value))
        if v.status != "ok":
            case = ET.SubElement(ts, "testcase", classname=f"qeval.{v.name}", name="evaluate")
            ET.SubElement(case, "error", message="variant not evaluated").text = v.error or ""
        for g in gates:
            case = ET.SubElement(ts, "testcase", classname=f"qeval.{v.name}", name=f"{g.suite}/{g.metric}")
            detail = (f"{g.mode}: baseline {g.base_mean}, variant {g.variant_mean}, delta {g.delta}, "
                      f"bounds [{g.lower_bound}, {g.upper_bound}], margin {g.margin} ({g.margin_spec}), "
                      f"alpha {g.alpha}, mde {g.mde}, p {g.p_value} ({r.multiplicity}: {g.p_adjusted}); {g.reason}")
            if g.sequential is not None:  # properties come first in a test case
                props = ET.SubElement(case, "properties")
                for name, value in (("sequential", g.sequential), ("items_used", g.items_used),
                                    ("items_planned", g.items_planned)):
                    if value is not None:
                        ET.SubElement(props, "property", name=name, value=str(value))
            out = []
            said = label(g, r.inconclusive)  # "FAIL (worse than the margin)"
            if g in failing:  # its type: the finding, so that a CI page can tell a clear miss from an unshown pass
                ET.SubElement(case, "failure", type=g.finding or g.verdict, message=f"{said}: {g.reason}").text = detail
            elif g in skipped:
                ET.SubElement(case, "skipped", message=g.reason or g.verdict)
            elif g.verdict in ("WARN", "INCONCLUSIVE"):
                out.append(f"{said}: {detail}")
            if g.sequential is not None:
                out.append(f"sequential: {stopped_at(g)}; method {g.sequential}")
            if out:
                ET.SubElement(case, "system-out").text = "\n".join(out)
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True)


def write(r: RunRecord, path: Path) -> Path:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(render(r))
    tmp.replace(path)
    return path
