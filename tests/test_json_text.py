"""The readable JSON writer: the same value as json.dumps, one line per record."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from planner.formats.json_text import dumps_readable

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=40) | st.dictionaries(st.text(max_size=10), inner, max_size=40),
    max_leaves=200,
)


@given(values, st.integers(min_value=1, max_value=300))
def test_the_text_is_the_same_json_value(value, width):
    assert json.loads(dumps_readable(value, width)) == value


def test_a_schedule_has_one_line_per_job_and_short_containers_stay_on_one_line():
    jobs = {str(i): {"model": "LM", "batch_size": 5, "command": f"python train.py --id {i}"} for i in range(100)}
    doc = {"format": "rota.schedule/v1", "worker_types": ["v100", "k80"], "jobs": jobs, "ids": list(range(1000))}
    text = dumps_readable(doc, width=120)
    lines = text.splitlines()
    assert lines[0] == "{" and lines[-1] == "}"
    assert ' "worker_types": ["v100", "k80"],' in lines
    job_lines = [line for line in lines if '"model": "LM"' in line]
    assert len(job_lines) == 100 and job_lines[0].startswith('  "0": {"model"')
    # a long list of numbers fills its lines, each within the width
    id_lines = lines[lines.index(' "ids": [') + 1 : -2]
    assert 1 < len(id_lines) < 100 and all(len(line) <= 120 for line in id_lines)
    assert json.loads(text) == doc


def test_a_record_wider_than_the_width_is_expanded():
    doc = {"jobs": {"a": {"command": "x" * 300, "model": "LM"}}}
    lines = dumps_readable(doc, width=100).splitlines()
    assert '   "model": "LM"' in lines  # the wide record got one member per line
