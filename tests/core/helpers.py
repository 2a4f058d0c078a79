"""Small algorithms that record when they run; core tests compose them."""

from composer_lab.core import Algorithm, Event


class Recorder(Algorithm):
    """Matches the given events and appends its name to a shared log when applied."""

    def __init__(self, name: str, events, log: list) -> None:
        self.name, self.events, self.log = name, frozenset(Event(e) for e in events), log

    def apply(self, event, state, logger):
        self.log.append(self.name)


class FakeSelectiveBackprop(Recorder):
    selects_batch = True


class FakeFusedLayerNorm(Recorder):
    fuses_layernorm = True


class FakeMixUp(Recorder):
    mixes_examples = True
