"""A rate card (price per GPU-hour by GPU model and pool) and the monthly statement it makes of usage.

Pure: the server reads the card's YAML and hands its mapping to ``parse_rate_card``; ``statement`` turns
usage rows (tenant, GPU model, pool, GPU-seconds) into lines priced by the most specific rate that matches:
model and pool, then model, then pool, then the card's default. Usage no rate matches is listed unpriced
(cost None), never priced at zero silently.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpupool.domain.errors import InputError


@dataclass(frozen=True, slots=True)
class Rate:
    per_gpu_hour: float
    gpu_model: str | None = None  # None: any model
    pool: str | None = None  # None: any pool


@dataclass(frozen=True, slots=True)
class RateCard:
    currency: str
    rates: tuple[Rate, ...]
    default: float | None = None

    def price(self, gpu_model: str, pool: str) -> float | None:
        """Per GPU-hour for ``gpu_model`` in ``pool``: the most specific rate that matches; None if none."""
        best: tuple[int, float] | None = None
        for r in self.rates:
            if r.gpu_model not in (None, gpu_model) or r.pool not in (None, pool):
                continue
            rank = 2 * (r.gpu_model is not None) + (r.pool is not None)
            if best is None or rank > best[0]:
                best = (rank, r.per_gpu_hour)
        return best[1] if best is not None else self.default


@dataclass(frozen=True, slots=True)
class StatementLine:
    tenant: str
    gpu_model: str
    pool: str
    gpu_hours: float
    per_gpu_hour: float | None
    cost: float | None  # None: no rate matched


def _price(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1e9:
        raise InputError(f"a price per GPU-hour is a number >= 0, got {value!r}", source=where)
    return float(value)


def _name(value: object, where: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise InputError(f"a GPU model or pool is a non-empty name, got {value!r}", source=where)
    return value


def parse_rate_card(data: object, source: str) -> RateCard:
    """A card from its YAML mapping: ``currency``, ``default`` (optional) and ``rates``: a list of
    ``{gpu_model?, pool?, per_gpu_hour}``. A key it does not know is refused by name."""
    if not isinstance(data, Mapping):
        raise InputError("a rate card is a mapping (currency:, default:, rates:)", source=source)
    unknown = set(data) - {"currency", "default", "rates"}
    if unknown:
        raise InputError(f"unknown key {sorted(map(str, unknown))[0]!r} (currency, default, rates)", source=source)
    currency = data.get("currency", "USD")
    if not isinstance(currency, str) or not currency:
        raise InputError(f"currency is a name such as EUR, got {currency!r}", source=f"{source}: currency")
    rates_in = data.get("rates") or []
    if not isinstance(rates_in, list):
        raise InputError("rates is a list of {gpu_model, pool, per_gpu_hour}", source=f"{source}: rates")
    rates: list[Rate] = []
    for i, r in enumerate(rates_in):
        where = f"{source}: rates[{i}]"
        if not isinstance(r, Mapping) or set(r) - {"gpu_model", "pool", "per_gpu_hour"} or "per_gpu_hour" not in r:
            raise InputError("a rate is {gpu_model?, pool?, per_gpu_hour}", source=where)
        rates.append(
            Rate(_price(r["per_gpu_hour"], where), _name(r.get("gpu_model"), where), _name(r.get("pool"), where))
        )
    default = data.get("default")
    return RateCard(currency, tuple(rates), None if default is None else _price(default, f"{source}: default"))


def statement(usage: Iterable[tuple[str, str, str, float]], card: RateCard) -> list[StatementLine]:
    """One line per (tenant, GPU model, pool) of ``usage`` (GPU-seconds), priced by ``card``."""
    lines = []
    for tenant, model, pool, gpu_s in sorted(usage):
        hours = gpu_s / 3600.0
        price = card.price(model, pool)
        lines.append(StatementLine(tenant, model, pool, hours, price, None if price is None else hours * price))
    return lines


def totals(lines: Sequence[StatementLine]) -> dict[str, tuple[float, float, bool]]:
    """Per tenant: GPU-hours, cost of the priced lines, and whether some line is unpriced."""
    out: dict[str, tuple[float, float, bool]] = {}
    for ln in lines:
        hours, cost, unpriced = out.get(ln.tenant, (0.0, 0.0, False))
        out[ln.tenant] = (hours + ln.gpu_hours, cost + (ln.cost or 0.0), unpriced or ln.cost is None)
    return out
