"""Every string a request can carry is ``Text``: the database-storable check can't be forgotten on a new field."""

from __future__ import annotations

import typing

import pytest
from pydantic import BaseModel, ValidationError

from gpupool.schemas import accounts, admin, api, base


def _inputs() -> list[type[BaseModel]]:
    """Every request model of every schemas module (subclasses of subclasses too)."""
    found: list[type[BaseModel]] = []
    todo = list(base.In.__subclasses__())
    while todo:
        model = todo.pop()
        found.append(model)
        todo.extend(model.__subclasses__())
    return sorted(set(found), key=lambda m: (m.__module__, m.__name__))


def test_the_request_models_of_every_schemas_module_are_checked() -> None:
    modules = {m.__module__ for m in _inputs()}
    assert {api.__name__, admin.__name__, accounts.__name__} <= modules, modules


def _strings_are_text(annotation: object) -> bool:
    """False if ``annotation`` holds a plain ``str`` anywhere (in a list, a dict key or value, an optional)."""
    if annotation is str:
        return False
    if annotation == base.Text:
        return True
    return all(_strings_are_text(arg) for arg in typing.get_args(annotation) if not isinstance(arg, str))


@pytest.mark.parametrize("model", _inputs(), ids=lambda m: m.__name__)
def test_every_string_of_every_request_model_is_storable_text(model: type[BaseModel]) -> None:
    for name, info in model.model_fields.items():
        annotation = typing.get_type_hints(model, include_extras=True)[name]
        assert _strings_are_text(annotation), f"{model.__name__}.{name}: {info.annotation} has a plain str"


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({"command": ["a\x00b"]}, ["command", 0]),
        ({"command": ["true"], "name": "x\x00"}, ["name"]),
        ({"command": ["true"], "env": {"K": "v\x00"}}, ["env", "K"]),
        ({"command": ["true"], "env": {"K\x00": "v"}}, ["env", "K\x00", "[key]"]),
        ({"command": ["true"], "pool": "\x00"}, ["pool"]),
        ({"command": ["true"], "gpu_models": ["H100", "\x00"]}, ["gpu_models", 1]),
        ({"command": ["true"], "node_selector": {"rack": "\x00"}}, ["node_selector", "rack"]),
        ({"command": ["true"], "idempotency_key": "k\x00"}, ["idempotency_key"]),
        ({"command": ["true"], "name": "lone \ud800 surrogate"}, ["name"]),
    ],
)
def test_text_the_database_cannot_store_is_refused_naming_the_field(body: dict[str, object], loc: list[object]) -> None:
    with pytest.raises(ValidationError) as caught:
        api.JobSubmit.model_validate(body)
    (err,) = caught.value.errors()
    assert list(err["loc"]) == loc
    assert "NUL" in err["msg"] or "unicode" in err["msg"]


def test_ordinary_unicode_is_text() -> None:
    job = api.JobSubmit.model_validate({"command": ["echo", "训练 ✓"], "name": "Ünïcode", "env": {"A": "é"}})
    assert job.command[1] == "训练 ✓"
