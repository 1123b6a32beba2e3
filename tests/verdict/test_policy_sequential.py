"""The `sequential` knob of a gate policy: parsed and validated (file:line, exit 2), and in the config hash
only where a policy sets it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from qeval.config import load_config
from qeval.errors import ConfigError
from qeval.verdict.policy import GatePolicy, GateRule, SequentialSpec

from ..test_bad_input import edit_yaml, workspace
from ..test_config import GOOD, ROOT, write


def test_the_knob_changes_the_hash_where_a_policy_sets_it(tmp_path):
    (tmp_path / "capitals.yaml").write_text((ROOT / "suites/custom/capitals.yaml").read_text())
    good = GOOD.replace(f"{ROOT}/suites/custom/capitals.yaml", "capitals.yaml")
    plain = load_config(write(tmp_path, good))
    assert load_config(write(tmp_path, good + "gates: {sequential: null}\n")).config_hash() == plain.config_hash()
    on = load_config(write(tmp_path, good + "gates: {sequential: {look_every: 25}}\n"))
    assert on.gates.sequential == SequentialSpec(look_every=25) and on.config_hash() != plain.config_hash()
    rule_on = load_config(write(tmp_path, good + "gates: {rules: [{match: '*', sequential: {method: betting}}]}\n"))
    assert rule_on.config_hash() not in {plain.config_hash(), on.config_hash()}


def test_a_rule_overrides_the_policy_and_the_dump_round_trips():
    p = GatePolicy(sequential={"look_every": 25},
                   rules=[GateRule(match="a/*"), GateRule(match="b/*", sequential={"method": "betting"})])
    assert p.sequential_of(p.rules[0]) == SequentialSpec(look_every=25)
    assert p.sequential_of(p.rules[1]).method == "betting"
    assert GatePolicy.model_validate(p.model_dump(mode="json")) == p
    assert GatePolicy().sequential_of(GateRule()) is None
    assert SequentialSpec().futility_spend == 0.05 and SequentialSpec(futility=0).futility_spend == 0
    assert SequentialSpec(method="betting").futility_spend == 0


@pytest.mark.parametrize("gates, says", [
    ("{sequential: {look_every: 0}}", "sequential.look_every: Input should be greater than or equal to 1"),
    ("{sequential: {min_items: 5}}", "sequential.min_items: Input should be greater than or equal to 20"),
    ("{sequential: {method: wald}}", "sequential.method: Input should be 'gsd' or 'betting'"),
    ("{sequential: {lookevery: 5}}", "sequential.lookevery: unknown key"),
    ("{sequential: {method: betting, futility: 0.1}}", "sequential: futility is a setting of method gsd, not betting"),
    ("{sequential: {futility: 0.6}}", "sequential.futility: Input should be less than 0.5"),
    ("{rules: [{mode: equivalence}, {}], sequential: {}}", "sequential: sequential gates are non-inferiority gates, "
                                                           "and rules [0] have another mode"),
    ("{rules: [{mode: superiority, sequential: {}}]}",
     "rules.0.sequential: sequential gates are non-inferiority gates, not superiority"),
])
def test_bad_values_name_the_file_line_and_key(tmp_path, gates, says):
    with pytest.raises(ConfigError) as e:
        load_config(write(tmp_path, GOOD + f"gates: {gates}\n"))
    assert says in str(e.value) and "c.yaml:line 8: gates." in str(e.value), str(e.value)
    assert "Value error" not in str(e.value)


def test_a_bad_value_in_a_policy_file_exits_2_through_the_cli(tmp_path):
    w = workspace(tmp_path)
    edit_yaml(w["policy"], lambda d: d.update(sequential={"look_every": -1}))
    r = subprocess.run([sys.executable, "-m", "qeval.cli", "run", str(w["config"])], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2 and "p.yaml" in r.stderr and "sequential.look_every" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
