"""Bans: functions an exercise makes unavailable while its check runs, and the routes to them that
the check refuses by reading the student's function before it runs (:func:`banned_use`)."""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import itertools
import os
import sys
import sysconfig
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch


class BannedFunction(RuntimeError):
    """Raised by a banned function called while its exercise is checked."""


def resolve(path: str) -> tuple[Any, str]:
    """``"torch.nn.functional.layer_norm"`` -> (the module torch.nn.functional, "layer_norm")."""
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            owner: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:-1]:
            owner = getattr(owner, part)
        if not hasattr(owner, parts[-1]):
            raise AttributeError(f"cannot ban {path!r}: there is no such function")
        return owner, parts[-1]
    raise ImportError(f"cannot ban {path!r}: no module to find it in")


def _originals(paths: Sequence[str]) -> dict[int, str]:
    """id of each banned function -> its path."""
    originals = {}
    for path in paths:
        owner, attr = resolve(path)
        originals[id(getattr(owner, attr))] = path
    return originals


def _is_banned(fn: Any, originals: dict[int, str]) -> str | None:
    """The banned path ``fn`` is (or wraps with functools.partial or a decorator), else None."""
    for _ in range(100):
        if id(fn) in originals:
            return originals[id(fn)]
        if isinstance(fn, functools.partial):
            fn = fn.func
        elif isinstance(getattr(fn, "__dict__", None), dict) and "__wrapped__" in fn.__dict__:
            fn = fn.__dict__["__wrapped__"]
        else:
            return None
    return None


_MODULE_INDEX: dict[tuple[frozenset[int], int], dict[int, list[tuple[Any, str]]]] = {}


def _module_names(ids: frozenset[int]) -> dict[int, list[tuple[Any, str]]]:
    """Every (module, name) of a loaded module that holds one of the objects ``ids``: the
    re-exports of a banned function (``course_lib.rl.wilson_interval`` is ``course_lib.evaluation``'s)."""
    key = (ids, len(sys.modules))
    if key not in _MODULE_INDEX:
        found: dict[int, list[tuple[Any, str]]] = {}
        for module in list(sys.modules.values()):
            namespace = getattr(module, "__dict__", None)
            if not isinstance(namespace, dict):
                continue
            for name, value in list(namespace.items()):
                if id(value) in ids:
                    found.setdefault(id(value), []).append((module, name))
        _MODULE_INDEX.clear()  # one set of bans at a time is all a check needs
        _MODULE_INDEX[key] = found
    return _MODULE_INDEX[key]


@contextlib.contextmanager
def banned(paths: Sequence[str], fn: Any = None) -> Iterator[None]:
    """While inside, each of ``paths`` raises :class:`BannedFunction`: in its module or class, in every
    loaded module that re-exports it, and under any name ``fn``'s module or closure bound it to
    (``from torch import logsumexp``). What the call cannot reach this way (a default argument, a
    container, torch's private namespaces) :func:`banned_use` finds by reading ``fn``."""
    _missing = object()
    undo: list[tuple[Any, str, Any]] = []
    originals: dict[int, str] = {}

    def replace(owner: Any, attr: str, value: Any) -> None:
        before = owner.__dict__.get(attr, _missing) if isinstance(owner, type) else getattr(owner, attr)
        undo.append((owner, attr, before))
        setattr(owner, attr, value)

    def refusal(path: str) -> Callable:
        def refuse(*args: Any, **kwargs: Any) -> Any:
            raise BannedFunction(f"{path} is banned in this exercise")

        return refuse

    try:
        for path in paths:
            owner, attr = resolve(path)
            originals[id(getattr(owner, attr))] = path
            replace(owner, attr, refusal(path))
        for held, places in _module_names(frozenset(originals)).items():
            for module, name in places:
                if module.__dict__.get(name) is not None and id(module.__dict__[name]) == held:
                    replace(module, name, refusal(originals[held]))
        scopes = [getattr(fn, "__globals__", {})] if paths else []
        for scope in scopes:  # the student's own names for a banned function
            for name, value in list(scope.items()):
                if id(value) in originals:
                    undo.append((scope, name, value))
                    scope[name] = refusal(originals[id(value)])
        for cell in getattr(fn, "__closure__", None) or ():
            with contextlib.suppress(ValueError):  # an empty cell
                if id(cell.cell_contents) in originals:
                    undo.append((cell, "cell_contents", cell.cell_contents))
                    cell.cell_contents = refusal(originals[id(cell.cell_contents)])
        yield
    finally:
        for owner, attr, before in reversed(undo):
            if isinstance(owner, dict):
                owner[attr] = before
            elif before is _missing:
                delattr(owner, attr)
            else:
                setattr(owner, attr, before)


class BanBypassed(RuntimeError):
    """Raised for a function that reaches a banned function by a route the check cannot close."""


_PRIVATE_TORCH = frozenset({"_C", "ops", "_ops", "_VF", "_execution_engine", "_refs", "_prims", "_decomp"})
"""Attribute names of torch's private namespaces (besides every ``torch._name``): where an exercise
bans a function, its C and ATen versions are reachable through them, so the check refuses them all."""

_LIBRARY_PATHS = {
    *(sysconfig.get_path(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")),
    Path(__file__).parents[1],
}
_LIBRARY_ROOTS = tuple(str(Path(p).resolve()) + os.sep for p in _LIBRARY_PATHS)  # course_lib's folder among them


def _library(obj: Any) -> bool:
    """``obj`` is defined by the standard library, an installed package or course_lib (not read
    further: the ban replaces what they call by name), not by the student."""
    code = getattr(obj, "__code__", None)
    if code is not None:
        filename = code.co_filename
    else:
        module = getattr(obj, "__module__", None)
        if not isinstance(module, str) or module == "__main__":  # a notebook's own class
            return False
        filename = getattr(sys.modules.get(module), "__file__", None) or ("<built-in>" if module == "builtins" else "")
    if filename.startswith(("<frozen", "<built-in")):
        return True
    return bool(filename) and not filename.startswith("<") and str(Path(filename).resolve()).startswith(_LIBRARY_ROOTS)


def _code_names(code: Any) -> tuple[set[str], set[str]]:
    """The names a code object and the code nested in it use, and its string constants."""
    names, strings = set(code.co_names), set()
    for const in code.co_consts:
        if isinstance(const, str):
            strings.add(const)
        elif inspect.iscode(const):
            more, more_strings = _code_names(const)
            names |= more
            strings |= more_strings
    return names, strings


def _private(names: set[str], strings: set[str], scope: dict) -> list[str]:
    """The names and strings by which code reaches torch's private namespaces."""
    hits = {n for n in names if n not in scope and (n in _PRIVATE_TORCH or _torch_private(n))}
    hits |= {s for s in strings if s in _PRIVATE_TORCH or _torch_private(s) or s.startswith(("torch._", "torch.ops"))}
    return sorted(hits)


def _torch_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name in vars(torch)


_ITEMS = 10_000  # the elements of one container read (a list of a million token ids hides no function)


def banned_use(paths: Sequence[str], fn: Any) -> str | None:
    """How ``fn`` uses a function that ``paths`` ban, in a sentence, read from ``fn`` before it runs:
    it is one (passing ``torch.logsumexp`` as the answer), or reaches one through a default argument,
    a closure, a global or an attribute it names, a container or class of its own, a function of its
    own that does (recursively), a re-export under another module's name, or torch's private
    namespaces (``torch._C``, ``torch.ops``, ``torch._*``). None when it does none of these."""
    if not paths:
        return None
    originals = _originals(paths)
    seen: set[int] = set()
    todo: list[tuple[Any, str]] = [(fn, "")]
    while todo and len(seen) < 100_000:
        obj, route = todo.pop()
        if id(obj) in seen or isinstance(obj, (str, bytes, int, float, complex, bool, torch.Tensor)) or obj is None:
            continue
        seen.add(id(obj))
        hit = _is_banned(obj, originals)
        if hit is not None:
            if not route:
                return f"{hit} is banned in this exercise: passing it is not writing it"
            return f"{hit} is banned in this exercise, and the function reaches it {route}"
        if isinstance(obj, functools.partial):
            todo += [(v, route or "through functools.partial") for v in (obj.func, *obj.args, *obj.keywords.values())]
        elif inspect.ismethod(obj):
            todo += [(obj.__func__, route), (obj.__self__, route)]
        elif isinstance(obj, (list, tuple, set, frozenset)):
            todo += [(v, route or "kept in a container") for v in itertools.islice(obj, _ITEMS)]
        elif isinstance(obj, dict):
            items = itertools.islice(obj.items(), _ITEMS)
            todo += [(v, route or "kept in a container") for item in list(items) for v in item]
        elif inspect.ismodule(obj) or _library(obj):
            continue  # reached by name below, attribute by attribute
        elif inspect.isfunction(obj):
            name = obj.__qualname__
            found = _reached_by(obj, originals)
            if found is not None:
                return found
            todo += [(d, f"as a default argument of {name}") for d in obj.__defaults__ or ()]
            todo += [(d, f"as a default argument of {name}") for d in (obj.__kwdefaults__ or {}).values()]
            for cell in obj.__closure__ or ():
                with contextlib.suppress(ValueError):  # an empty cell
                    todo.append((cell.cell_contents, route or f"through a name {name} closes over"))
            names, _ = _code_names(obj.__code__)
            todo += [
                (obj.__globals__[n], route or f"through the global {n} of {name}")
                for n in names
                if n in obj.__globals__
            ]
        elif isinstance(obj, type):
            todo += [(v, route or f"through the class {obj.__name__}") for v in list(vars(obj).values())]
        elif isinstance(getattr(obj, "__dict__", None), dict):
            todo += [
                (type(obj), route),
                *((v, route or "through an object's attribute") for v in list(vars(obj).values())),
            ]
    return None


def _reached_by(fn: Any, originals: dict[int, str]) -> str | None:
    """What ``fn``'s code reaches by attribute: a banned function as ``module.name`` (followed through
    the modules and classes it names, and modules named by a string), or torch's private namespaces."""
    names, strings = _code_names(fn.__code__)
    private = _private(names, strings, fn.__globals__)
    if private:
        return (
            f"{fn.__qualname__} reaches torch's private namespaces ({', '.join(private)}), which are banned in "
            "this exercise: they hold the C and ATen versions of its banned functions"
        )
    frontier = [fn.__globals__[n] for n in names if n in fn.__globals__]
    frontier += [sys.modules[s] for s in strings if s in sys.modules]
    frontier = [v for v in frontier if inspect.ismodule(v) or isinstance(v, type)]
    seen = {id(v) for v in frontier}
    for _ in range(4):  # torch.nn.functional.cross_entropy: three attributes deep
        following = []
        for owner in frontier:
            for n in names:
                value = inspect.getattr_static(owner, n, None)
                hit = None if value is None else _is_banned(value, originals)
                if hit is not None:
                    where = getattr(owner, "__name__", "?")
                    return f"{hit} is banned in this exercise, and {fn.__qualname__} reaches it as {where}.{n}"
                if (inspect.ismodule(value) or isinstance(value, type)) and id(value) not in seen:
                    seen.add(id(value))
                    following.append(value)
        frontier = following
    return None
