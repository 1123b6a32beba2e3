"""What sets two variants of one method apart, said in words in the report."""

from __future__ import annotations

from qeval.record.run import VariantResult
from qeval.report.differences import differences

RECIPE = {"method": "gptq", "group_size": 64, "symmetric": True, "samples": 64, "seq_len": 256, "dtype": "bfloat16"}
TEAM = {"field": "text", "samples": None, "seq_len": None, "chat_template": False, "seed": 0, "split": None,
        "sha256": "0123456789abcdef0123", "file": "team.jsonl"}


def _v(name: str, role: str = "variant", **kw) -> VariantResult:
    return VariantResult(name=name, method=kw.get("recipe", RECIPE).get("method", "bf16"), role=role,
                         dtype="bfloat16", **kw)


def test_variants_differing_only_in_calibration_data_are_said_to_and_which():
    lines = differences([_v("bf16", role="baseline"), _v("gptq-pydoc", recipe=RECIPE),
                         _v("gptq-team", recipe=RECIPE | {"calibration_data": TEAM})])
    assert lines == ["gptq-pydoc and gptq-team (gptq) differ only in calibration data: CPython's pydoc text "
                     "(the default) against team.jsonl (sha256 0123456789ab, field text)"]


def test_several_differences_are_listed_and_other_methods_are_not_paired():
    rtn = {"method": "rtn", "group_size": 64, "symmetric": True}
    lines = differences([_v("g64", recipe=RECIPE), _v("g128", recipe=RECIPE | {"group_size": 128},
                                                          kv_cache_dtype="fp8"), _v("rtn", recipe=rtn)])
    assert lines == ["g64 and g128 (gptq) differ in group_size: 64 against 128; "
                     "KV cache: the model's dtype against fp8"]


def test_a_repeated_recipe_is_said_to_be_the_same():
    assert differences([_v("a", recipe=RECIPE), _v("b", recipe=dict(RECIPE))]) == [
        "a and b (gptq) have the same recipe and are served alike"]


def test_the_report_has_the_section_only_where_variants_of_one_method_differ():
    from qeval.record.run import RunRecord
    from qeval.report.markdown import render

    def record(*variants: VariantResult) -> str:
        return render(RunRecord(run_id="r", campaign="c", config_hash="h", config={}, config_file="c.yaml",
                                command=[], started_at="2026-12-02T00:00:00", variants=list(variants)))

    two = record(_v("gptq-pydoc", recipe=RECIPE), _v("gptq-team", recipe=RECIPE | {"calibration_data": TEAM}))
    assert "## How variants of one method differ\n\n- gptq-pydoc and gptq-team (gptq) differ only in calibration" in two
    assert "How variants of one method differ" not in record(_v("gptq", recipe=RECIPE))
