"""What every REST API v1 wire model shares: strict requests, frozen answers, and text the database can store.

Every string a request carries is ``Text``. PostgreSQL's ``text`` holds no NUL character (and neither
database takes a lone surrogate, which pydantic's ``str`` already refuses); a job name with a NUL used to
reach the group commit and fail its whole batch, other tenants' jobs included.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict


class In(BaseModel):
    """A request body: unknown fields are refused, naming them."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Out(BaseModel):
    """An answer."""

    model_config = ConfigDict(frozen=True)


def storable_text(value: str) -> str:
    """``value`` unchanged if the database can store it; a ValueError saying why not (pydantic names the field).
    Lone surrogates need no check here: pydantic's own ``str`` refuses them."""
    if "\x00" in value:
        raise ValueError("contains a NUL character (\\u0000), which the database cannot store")
    return value


Text = Annotated[str, AfterValidator(storable_text)]
