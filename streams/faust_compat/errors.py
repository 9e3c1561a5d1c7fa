"""The loud error of every accessor in this package, and the checks they are built from.

Each check names the library, its installed version and the attribute it looked for, so a
faust-streaming, mode or aiokafka upgrade that moves an internal fails with that message
(at worker startup: ``streams.faust_compat.check``) instead of a blank figure later."""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable, Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Any

FAUST = "faust-streaming"
MODE = "mode-streaming"
AIOKAFKA = "aiokafka"


def installed(library: str) -> str:
    try:
        return version(library)
    except PackageNotFoundError:
        return "not installed"


class FaustCompatError(RuntimeError):
    """An internal of faust-streaming, mode or aiokafka the service relies on is missing or
    changed in the installed version (see streams/faust_compat)."""

    def __init__(self, library: str, attribute: str, problem: str) -> None:
        self.library = library
        self.version = installed(library)
        self.attribute = attribute
        self.problem = problem
        super().__init__(
            f"{library}=={self.version}: {attribute} {problem} "
            "(streams/faust_compat relies on it; install the versions of requirements.lock "
            "or carry the change over)"
        )


def attr(obj: object, name: str, library: str, owner: str) -> Any:
    """``obj.<name>``, raising FaustCompatError when the object has no such attribute."""
    try:
        return getattr(obj, name)
    except AttributeError:
        raise FaustCompatError(library, f"{owner}.{name}", "is missing") from None


def annotated(cls: type, name: str, library: str) -> None:
    """The class declares the instance attribute ``name`` (Faust and mode annotate theirs)."""
    if not any(name in vars(k).get("__annotations__", {}) for k in cls.__mro__):
        raise FaustCompatError(library, f"{qualname(cls)}.{name}", "is no longer declared")


def assigned_in_init(cls: type, names: Sequence[str], library: str) -> None:
    """``__init__`` still sets each of ``names`` on the instance (for a class that neither
    annotates its attributes nor can be built without a running loop, e.g. aiokafka's)."""
    init = vars(cls).get("__init__")
    if init is None:
        raise FaustCompatError(library, f"{qualname(cls)}.__init__", "is inherited now")
    source = _source(init, library, f"{qualname(cls)}.__init__")
    for name in names:
        if f"self.{name} =" not in source:
            raise FaustCompatError(library, f"{qualname(cls)}.{name}", "is no longer set")


def source_says(func: Callable[..., Any], text: str, library: str, name: str) -> None:
    """``func``'s source still contains ``text`` (a setting a copy here must match)."""
    if text not in _source(func, library, name):
        raise FaustCompatError(library, name, f"no longer has {text!r}")


def method(
    cls: type, name: str, params: Sequence[str], library: str, *, own: bool = False
) -> Callable[..., Any]:
    """The class's method ``name``, whose parameters after ``self`` start with ``params``;
    ``own``: defined by the class itself (not a base class's abstract stub)."""
    if own and name not in vars(cls):
        raise FaustCompatError(library, f"{qualname(cls)}.{name}", "is missing")
    found = attr(cls, name, library, qualname(cls))
    if not callable(found):
        raise FaustCompatError(library, f"{qualname(cls)}.{name}", "is not a method")
    signature(found, ["self", *params], library, f"{qualname(cls)}.{name}")
    return found  # type: ignore[no-any-return]


def signature(func: Callable[..., Any], params: Sequence[str], library: str, name: str) -> None:
    """``func`` takes ``params`` first, in that order, by those names."""
    have = list(inspect.signature(func).parameters)
    if have[: len(params)] != list(params):
        raise FaustCompatError(
            library, name, f"takes ({', '.join(have)}), not ({', '.join(params)})"
        )


def source_sha256(func: Callable[..., Any], expected: str, library: str, name: str) -> None:
    """``func``'s source is exactly the one a copy in this package was made from."""
    found = hashlib.sha256(_source(func, library, name).encode()).hexdigest()
    if found != expected:
        raise FaustCompatError(
            library, name, f"changed (source sha256 {found}, copied from {expected})"
        )


def _source(func: Callable[..., Any], library: str, name: str) -> str:
    try:
        return inspect.getsource(func)
    except (OSError, TypeError) as exc:
        raise FaustCompatError(library, name, f"has no readable source ({exc})") from None


def qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"
