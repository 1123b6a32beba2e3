"""One reading of a server's Prometheus `/metrics`: the exposition text as sums, counts and gauge values.

Read by the engines' watchdog (its sign of progress) and by the probe's server view (engines declare the names
in capabilities.MetricNames)."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families


@dataclass(frozen=True)
class Scrape:
    """One /metrics reading, summed over label sets."""

    hists: dict[str, tuple[float, float]]  # histogram or summary -> (sum, count)
    counters: dict[str, float]  # by family name, without `_total`
    gauges: dict[str, tuple[float, ...]]  # one value per label set

    def names(self) -> set[str]:
        return set(self.hists) | set(self.counters) | set(self.gauges)


def parse(text: str) -> Scrape:
    """Prometheus text exposition -> sums and counts (raises ValueError on text that is not one)."""
    hists: dict[str, list[float]] = {}
    counters: dict[str, float] = {}
    gauges: dict[str, list[float]] = {}
    for fam in text_string_to_metric_families(text):
        if fam.type in ("histogram", "summary"):
            acc = hists.setdefault(fam.name, [0.0, 0.0])
            for s in fam.samples:
                if s.name == fam.name + "_sum":
                    acc[0] += s.value
                elif s.name == fam.name + "_count":
                    acc[1] += s.value
        elif fam.type == "counter":
            # the parser names counter families without `_total`; `_created` samples are timestamps
            counters[fam.name] = sum(s.value for s in fam.samples if s.name == fam.name + "_total")
        elif fam.type == "gauge":
            gauges[fam.name] = [s.value for s in fam.samples]
    return Scrape(hists={k: (v[0], v[1]) for k, v in hists.items()}, counters=counters,
                  gauges={k: tuple(v) for k, v in gauges.items()})
