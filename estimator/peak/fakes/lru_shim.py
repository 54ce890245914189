"""Fresh ``compile_compatible_method_lru_cache`` caches for every simulated step.

transformers memoises a few tensor-making helpers with ``pytorch_utils.compile_compatible_method_lru_cache``
(a ``functools.lru_cache`` keyed on the call's plain arguments: patch-grid sizes, dtype, device, the
module): DINOv3's and Sapiens2's ``get_patches_center_coordinates``, the DETR family's and SAM's
``build_sine_position_embedding``, D-FINE's / RT-DETR's anchors, MaskFormer's position embedding's
``forward``. The cache is process-wide, so a tensor made in one simulation (a fake tensor of that
simulation's ``FakeTensorMode``) or in a real run is handed to the next simulation that asks with the
same arguments: ``AssertionError: Mixing fake modes NYI``, or a real tensor where a fake one is
expected. The wrapper bypasses its cache only while torchdynamo compiles, so the cache itself is
emptied instead: :func:`fresh_lru_caches` clears every such cache of the transformers modules loaded
when a simulated step starts and when it ends. Inside the step the caches work as on a real run: the
first call makes the tensor, the cache keeps it alive (the tracker sees it live to the end of the
step, as the real cache keeps it), later calls get it back.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["clear_method_lru_caches", "fresh_lru_caches"]

# module name -> the cache_clear of each wrapper found in it (a loaded module's functions do not change)
_FOUND: dict[str, list[Callable[[], None]]] = {}


# the decorator -> the code object of the wrapper it returns (made once: making one costs more than the clearing)
_CODE: dict[int, tuple[Any, Any]] = {}


def _wrapper_code() -> Any:
    """The code object of the wrapper ``compile_compatible_method_lru_cache`` returns, or ``None``
    where this transformers has no such decorator."""
    utils = sys.modules.get("transformers.pytorch_utils")
    decorator = getattr(utils, "compile_compatible_method_lru_cache", None)
    if decorator is None:
        return None
    known = _CODE.get(id(decorator))
    if known is None or known[0] is not decorator:
        known = _CODE[id(decorator)] = (decorator, getattr(decorator(maxsize=1)(lambda: None), "__code__", None))
    return known[1]


def _cache_clear(obj: Any, code: Any) -> Callable[[], None] | None:
    """The ``cache_clear`` of the lru cache behind ``obj`` when ``obj`` is such a wrapper (plain,
    or as a class's ``staticmethod`` / ``classmethod``)."""
    fn = getattr(obj, "__func__", obj)
    if getattr(fn, "__code__", None) is not code:
        return None
    for cell in fn.__closure__ or ():
        try:
            clear = getattr(cell.cell_contents, "cache_clear", None)
        except ValueError:  # an empty cell
            continue
        if callable(clear):
            return clear
    return None


def _scan(module: Any, code: Any) -> list[Callable[[], None]]:
    """The caches of one module: its functions' and its classes' (methods, static methods)."""
    found: list[Callable[[], None]] = []
    for obj in list(vars(module).values()):
        members = vars(obj).values() if isinstance(obj, type) and obj.__module__ == module.__name__ else (obj,)
        for member in list(members):
            clear = _cache_clear(member, code)
            if clear is not None and clear not in found:
                found.append(clear)
    return found


# (len(sys.modules), the last module's name) -> the loaded transformers modules (one walk per import, not per step)
_MODULES: dict[tuple[int, str | None], list[tuple[str, Any]]] = {}


def _transformers_modules() -> list[tuple[str, Any]]:
    key = (len(sys.modules), next(reversed(sys.modules), None))
    found = _MODULES.get(key)
    if found is None:
        _MODULES.clear()
        found = _MODULES[key] = [(name, module) for name, module in list(sys.modules.items())
                                 if module is not None and name.startswith("transformers.")]
    return found


def clear_method_lru_caches() -> int:
    """Empty every ``compile_compatible_method_lru_cache`` of the loaded ``transformers`` modules;
    returns how many caches were cleared."""
    code = _wrapper_code()
    if code is None:
        return 0
    count = 0
    for name, module in _transformers_modules():
        found = _FOUND.get(name)
        if found is None:
            found = _scan(module, code)
            if not getattr(getattr(module, "__spec__", None), "_initializing", False):  # scanned once complete
                _FOUND[name] = found
        for clear in found:
            clear()
            count += 1
    return count


@contextlib.contextmanager
def fresh_lru_caches() -> Iterator[None]:
    """Around a simulated step: the caches start empty (nothing from an earlier simulation or real
    run comes in) and are emptied again at the end (no fake tensor outlives its simulation)."""
    clear_method_lru_caches()
    try:
        yield
    finally:
        clear_method_lru_caches()
