"""A short-chunk logprobs suite: how many chunks a named corpus holds, and a corpus too small refused."""

import pytest

from qeval.config import ConfigError, LogprobsSuiteRef
from qeval.suites.logprobs import load_logprobs_suite


def test_stdlib_holds_thousands_of_chunks_in_an_order_that_depends_on_the_text_only():
    """A suite of 2,000 chunks (what a campaign at a realistic size asks) from the interpreter's own modules."""
    ref = LogprobsSuiteRef(kind="logprobs", name="code", corpus="stdlib", chunks=2000)
    s = load_logprobs_suite(ref)
    assert len(s.chunks) == 2000 and len(set(s.chunks)) == 2000
    assert all(len(c) == ref.chunk_chars and "  " not in c for c in s.chunks)
    again = load_logprobs_suite(ref)
    assert again.chunks == s.chunks and again.key == s.key
    prose = load_logprobs_suite(LogprobsSuiteRef(kind="logprobs", name="doc", corpus="docstrings", chunks=300))
    assert len(prose.chunks) == 300 and not set(prose.chunks) & set(s.chunks)


@pytest.mark.parametrize("corpus", ["pydoc", "docstrings"])
def test_more_chunks_than_the_corpus_holds_is_refused_with_what_it_holds(corpus):
    with pytest.raises(ConfigError, match=rf"corpus {corpus} holds \d+ chunks of 1200 characters; chunks: 9000"):
        load_logprobs_suite(LogprobsSuiteRef(kind="logprobs", corpus=corpus, chunks=9000))
