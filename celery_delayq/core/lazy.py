"""Module attributes imported on first use (PEP 562): a process imports only what it
uses, so the first delayed publish of a web process does not load the operations,
the other brokers or the store's facets for moving, listing and counting."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any, Generic, TypeVar, cast, overload

OwnerT = TypeVar("OwnerT")
T = TypeVar("T")


def lazy_attributes(
    module: str, homes: Mapping[str, str], package: str | None = None
) -> Callable[[str], Any]:
    """The ``__getattr__`` of ``module``: imports ``name`` from ``homes[name]`` on its
    first use, a module named relative to ``package`` (by default ``module``, a
    package)."""

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        return getattr(import_module(home, package or module), name)

    return __getattr__


class first_use(Generic[OwnerT, T]):
    """``functools.cached_property`` without the lock it takes up to Python 3.11 (one
    lock for the attribute of every instance): a thread making a value while a prefork
    pool forks would leave that lock held for good in the child. Threads that make the
    value at once all get the first one stored."""

    def __init__(self, make: Callable[[OwnerT], T]) -> None:
        self.make = make
        self.name = make.__name__
        self.__doc__ = make.__doc__

    def __set_name__(self, owner: type[OwnerT], name: str) -> None:
        self.name = name

    @overload
    def __get__(self, instance: None, owner: type[OwnerT]) -> first_use[OwnerT, T]: ...

    @overload
    def __get__(self, instance: OwnerT, owner: type[OwnerT] | None = None) -> T: ...

    def __get__(
        self, instance: OwnerT | None, owner: type[OwnerT] | None = None
    ) -> T | first_use[OwnerT, T]:
        if instance is None:
            return self
        # Kept in the instance's __dict__, which is read before this (non-data) descriptor.
        return cast(T, instance.__dict__.setdefault(self.name, self.make(instance)))
