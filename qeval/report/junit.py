"""JUnit XML for CI: one test case per gate, so a CI page lists each gate's result and reason."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from ..record import RunRecord


def render(r: RunRecord) -> str:
    suites = ET.Element("testsuites", name=f"qeval {r.campaign}")
    by_variant: dict[str, list] = {}
    for g in r.gates:
        by_variant.setdefault(g.variant, []).append(g)
    for v in r.variants:
        if v.role == "baseline":
            continue
        gates = by_variant.get(v.name, [])
        failing = [g for g in gates if g.verdict == "FAIL" or (g.verdict == "INCONCLUSIVE" and r.inconclusive == "fail")]
        ts = ET.SubElement(suites, "testsuite", name=f"{r.campaign}/{v.name}", tests=str(max(len(gates), 1)),
                           failures=str(len(failing)), errors="1" if v.status != "ok" else "0")
        if v.status != "ok":
            case = ET.SubElement(ts, "testcase", classname=f"qeval.{v.name}", name="evaluate")
            ET.SubElement(case, "error", message="variant not evaluated").text = v.error or ""
        for g in gates:
            case = ET.SubElement(ts, "testcase", classname=f"qeval.{v.name}", name=f"{g.suite}/{g.metric}")
            detail = (f"{g.mode}: baseline {g.base_mean}, variant {g.variant_mean}, delta {g.delta}, "
                      f"bounds [{g.lower_bound}, {g.upper_bound}], margin {g.margin} ({g.margin_spec}), "
                      f"alpha {g.alpha}, mde {g.mde}, p {g.p_value} ({r.multiplicity}: {g.p_adjusted}); {g.reason}")
            if g in failing:
                ET.SubElement(case, "failure", message=f"{g.verdict}: {g.reason}").text = detail
            elif g.verdict in ("WARN", "INCONCLUSIVE"):
                ET.SubElement(case, "system-out").text = f"{g.verdict}: {detail}"
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True)


def write(r: RunRecord, path: Path) -> Path:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(render(r))
    tmp.replace(path)
    return path
