"""A registry of kinds: the one place that maps a `kind = "..."` name to its declaration.

A mechanism or workload kind declares itself once, in its own module (its scenario
model, what it needs, how it runs); the registry of its family lists it, and the
scenario schema validates each `kind` table through the registry at validation time.
Nothing else names a kind. A kind registered later (a plugin, a test) is valid in
every scenario validated after it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Annotated, Any, Generic, Protocol, TypeVar, Union, get_args

from pydantic import BaseModel, Field, GetCoreSchemaHandler, TypeAdapter, ValidationInfo
from pydantic_core import core_schema


class Declared(Protocol):
    """What a registry needs of a kind: its name and its scenario model."""

    @property
    def name(self) -> str: ...

    @property
    def model(self) -> type[BaseModel]: ...


K = TypeVar("K", bound=Declared)


class KindRegistry(Generic[K]):
    """Kinds of one family (mechanisms, workloads) by name, in registration order."""

    def __init__(self, family: str, kinds: Iterable[K] = ()) -> None:
        self.family = family
        self._kinds: dict[str, K] = {}
        self._adapter: tuple[tuple[type[BaseModel], ...], TypeAdapter[Any]] | None = None
        for kind in kinds:
            self.register(kind)

    def register(self, kind: K) -> K:
        """Add `kind`; a name taken already is a programming error."""
        if kind.name in self._kinds:
            raise ValueError(f"{self.family} kind {kind.name!r} is registered already")
        field = kind.model.model_fields.get("kind")
        tags = get_args(field.annotation) if field is not None else ()
        if tags != (kind.name,):
            raise ValueError(
                f"{self.family} kind {kind.name!r}: its model's `kind` must be "
                f'Literal["{kind.name}"] (found {tags or "no kind field"})'
            )
        self._kinds[kind.name] = kind
        return kind

    def unregister(self, name: str) -> None:
        self._kinds.pop(name, None)

    @contextmanager
    def registered(self, kind: K) -> Iterator[K]:
        """`kind` registered for the duration of a `with` block (tests, plugins)."""
        self.register(kind)
        try:
            yield kind
        finally:
            self.unregister(kind.name)

    def get(self, name: str) -> K:
        try:
            return self._kinds[name]
        except KeyError:
            raise KeyError(
                f"no {self.family} kind {name!r}; the known kinds are {', '.join(self._kinds)}"
            ) from None

    def __contains__(self, name: object) -> bool:
        return name in self._kinds

    def __iter__(self) -> Iterator[K]:
        return iter(list(self._kinds.values()))

    def names(self) -> list[str]:
        return list(self._kinds)

    def of(self, spec: BaseModel) -> K:
        """The kind a validated scenario entry belongs to."""
        return self.get(str(getattr(spec, "kind", "")))

    def adapter(self) -> TypeAdapter[Any]:
        """A validator of one entry: a union of the registered models told apart by `kind`."""
        models = tuple(k.model for k in self._kinds.values())
        if self._adapter is None or self._adapter[0] != models:
            if not models:
                raise ValueError(f"no {self.family} kind is registered")
            union: Any = models[0] if len(models) == 1 else Union[models]  # noqa: UP007
            # One model alone cannot carry a discriminator: pydantic checks its Literal `kind`.
            annotated: Any = (
                union if len(models) == 1 else Annotated[union, Field(discriminator="kind")]
            )
            self._adapter = (models, TypeAdapter(annotated))
        return self._adapter[1]

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        """Used as `Annotated[Base, REGISTRY]`: each entry is validated by the model its
        `kind` names, looked up when the entry is validated (so a kind registered after
        the schema was built counts), with the errors located inside the entry."""

        def validate(value: Any, _next: Any, info: ValidationInfo) -> Any:
            return self.adapter().validate_python(value, context=info.context)

        return core_schema.with_info_wrap_validator_function(
            validate,
            core_schema.any_schema(),
            serialization=core_schema.plain_serializer_function_ser_schema(
                _dump, info_arg=True, return_schema=core_schema.any_schema()
            ),
        )


def _dump(value: Any, info: core_schema.SerializationInfo) -> Any:
    """Serialise an entry as its own model does (the field's static type is the base)."""
    if isinstance(value, BaseModel):
        return value.model_dump(
            mode=info.mode,
            by_alias=bool(info.by_alias),
            exclude_none=info.exclude_none,
            exclude_defaults=info.exclude_defaults,
        )
    return value
