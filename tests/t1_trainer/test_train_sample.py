"""The trainer trains on `t1_tito.Sample` itself: no hand-copied view with untyped fields."""

from __future__ import annotations

import dataclasses
import typing

from t1_tito import Sample
from t1_trainer.samples import TrainSample


def test_the_trainers_sample_is_the_tito_sample():
    assert TrainSample is Sample


def test_no_field_of_the_sample_is_typed_any():
    hints = typing.get_type_hints(Sample)
    fields = {f.name for f in dataclasses.fields(Sample)}
    assert fields <= set(hints)
    assert [name for name in fields if hints[name] is typing.Any] == []
