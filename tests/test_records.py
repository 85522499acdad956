"""Run records: a record that fails its schema is refused saying where and what, the same way
wherever it is read (the report, the leaderboard's submit and its board)."""

from __future__ import annotations

import pytest
from record_factory import make_record

from gameon.records import parse_record


def test_an_invalid_record_names_its_first_problems_and_counts_the_rest() -> None:
    data = make_record(0, [True, False]).model_dump(mode="json")
    for key in ("run_id", "protocol", "curriculum", "learner", "seed", "budget", "curve"):
        del data[key]

    with pytest.raises(ValueError) as refused:
        parse_record(data, "runs/x/record.json")

    assert str(refused.value) == (
        "runs/x/record.json is not a valid run record (gameon-run-record-v1): run_id: Field "
        "required; protocol: Field required; curriculum: Field required; learner: Field "
        "required; seed: Field required; and 2 more problems"
    )
