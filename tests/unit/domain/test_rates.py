"""The rate card: the most specific rate wins (model and pool, model, pool, default); usage no rate matches is
unpriced, never free; a card with an unknown key or a bad price is refused by name."""

from __future__ import annotations

import pytest

from gpupool.domain.errors import InputError
from gpupool.domain.rates import parse_rate_card, statement, totals

CARD = {
    "currency": "EUR",
    "rates": [
        {"gpu_model": "H100", "per_gpu_hour": 2.5},
        {"gpu_model": "H100", "pool": "research", "per_gpu_hour": 2.0},
        {"pool": "spot", "per_gpu_hour": 0.5},
    ],
}


def test_the_most_specific_rate_wins() -> None:
    card = parse_rate_card(CARD, "rates.yaml")
    assert card.price("H100", "default") == 2.5
    assert card.price("H100", "research") == 2.0
    assert card.price("A100", "spot") == 0.5
    assert card.price("H100", "spot") == 2.5  # a model's rate is more specific than a pool's
    assert card.price("A100", "default") is None
    assert parse_rate_card({**CARD, "default": 1.0}, "r").price("A100", "default") == 1.0


def test_a_statement_prices_lines_and_sums_per_tenant() -> None:
    card = parse_rate_card(CARD, "rates.yaml")
    lines = statement([("t", "H100", "research", 7200.0), ("t", "A100", "default", 3600.0)], card)
    assert [(ln.gpu_model, ln.gpu_hours, ln.cost) for ln in lines] == [("A100", 1.0, None), ("H100", 2.0, 4.0)]
    assert totals(lines) == {"t": (3.0, 4.0, True)}


@pytest.mark.parametrize(
    ("card", "message"),
    [
        ({"currency": "EUR", "rate": []}, "unknown key 'rate'"),
        ({"rates": [{"gpu_model": "H100", "per_gpu_hour": -1}]}, "rates[0]: a price per GPU-hour is a number >= 0"),
        ({"rates": [{"gpu_model": "H100"}]}, "rates[0]: a rate is {gpu_model?, pool?, per_gpu_hour}"),
        ({"rates": [{"gpu_model": "", "per_gpu_hour": 1}]}, "rates[0]: a GPU model or pool is a non-empty name"),
        ({"default": "cheap"}, "default: a price per GPU-hour is a number"),
        (["not", "a", "mapping"], "a rate card is a mapping"),
    ],
)
def test_a_bad_card_is_refused_by_name(card: object, message: str) -> None:
    with pytest.raises(InputError) as e:
        parse_rate_card(card, "rates.yaml")
    assert message in str(e.value) and str(e.value).startswith("rates.yaml"), str(e.value)
