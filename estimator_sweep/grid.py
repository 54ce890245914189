"""The grid a sweep runs for every model: modes x scenarios x GPUs, each one ``estimate()`` call.

A :class:`Grid` holds the option lists the CLI takes (the single estimate's option names, each
possibly repeated); :meth:`Grid.scenarios` expands it into :class:`Scenario` values, each the
keyword arguments of one :func:`estimator.estimate` call. Options a mode ignores are not crossed
into it (a load scenario has no batch size), so every scenario is a distinct answer.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from estimator.api import target_gpu
from estimator.options import DEFAULT_DTYPES, parse_options

GRID_VERSION = 1  # bump when a grid's meaning changes, so old parts are recomputed


@dataclass(frozen=True)
class Scenario:
    """One ``estimate()`` call's options (everything but the model, its revision and the dtypes)."""

    mode: str
    batch_size: int | None = None
    seq_len: int | None = None
    max_new_tokens: int | None = None
    optimizer: str | None = None
    lora_rank: int | None = None
    gradient_checkpointing: bool | None = None
    pure_16bit: bool | None = None
    device: str = "cuda"
    gpu: str | None = None
    gpu_memory: str | None = None

    def estimate_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of :func:`estimator.estimate` for this scenario (the defaults left out)."""
        kwargs: dict[str, Any] = {"mode": self.mode, "device": self.device}
        for name in ("batch_size", "seq_len", "max_new_tokens", "optimizer", "lora_rank", "gradient_checkpointing", "pure_16bit",
                     "gpu", "gpu_memory"):
            value = getattr(self, name)
            if value is not None:
                kwargs[name] = value
        return kwargs

    @property
    def gpu_label(self) -> str | None:
        """The GPU as asked: a name, or a memory size."""
        return self.gpu if self.gpu is not None else self.gpu_memory


@dataclass(frozen=True)
class Grid:
    """The option lists of a sweep; ``None`` dtypes means the single estimate's default dtypes."""

    dtypes: tuple[str, ...] | None = None
    modes: tuple[str, ...] = ("load",)
    batch_sizes: tuple[int, ...] = (1,)
    seq_lens: tuple[int | None, ...] = (None,)
    max_new_tokens: tuple[int, ...] = (0,)
    optimizers: tuple[str, ...] = ("adamw",)
    lora_ranks: tuple[int | None, ...] = (None,)
    gradient_checkpointing: tuple[bool, ...] = (False,)
    pure_16bit: bool = False
    device: str = "cuda"
    # device cpu: the threads of the run simulated; None is filled in with the asking process's
    # torch.get_num_threads() when the grid is made, so that the workers (one thread each) answer as it would
    cpu_threads: int | None = None
    gpus: tuple[str, ...] = ()
    gpu_memories: tuple[str, ...] = ()
    library: str = "auto"
    extra: dict[str, Any] = field(default_factory=dict)  # other estimate() keywords, the same for every call

    def __post_init__(self) -> None:
        if self.device == "cpu" and self.cpu_threads is None:
            import torch

            object.__setattr__(self, "cpu_threads", torch.get_num_threads())

    @property
    def row_dtypes(self) -> tuple[str, ...]:
        """The dtypes each scenario answers (an error row is written for each)."""
        return self.dtypes if self.dtypes is not None else tuple(d.value for d in DEFAULT_DTYPES)

    def _targets(self) -> list[tuple[str | None, str | None]]:
        targets: list[tuple[str | None, str | None]] = [(g, None) for g in self.gpus] + [(None, m) for m in self.gpu_memories]
        return targets or [(None, None)]

    def scenarios(self) -> list[Scenario]:
        """Every scenario, mode by mode in the order given, then GPU by GPU."""
        out: list[Scenario] = []
        for mode in self.modes:
            shapes: list[dict[str, Any]]
            if mode == "inference":
                shapes = [{"batch_size": b, "seq_len": s, "max_new_tokens": n}
                          for b, s, n in itertools.product(self.batch_sizes, self.seq_lens, self.max_new_tokens)]
            elif mode == "training":
                shapes = [{"batch_size": b, "seq_len": s, "optimizer": o, "lora_rank": r, "gradient_checkpointing": g, "pure_16bit": self.pure_16bit}
                          for b, s, o, r, g in itertools.product(self.batch_sizes, self.seq_lens, self.optimizers, self.lora_ranks,
                                                                 self.gradient_checkpointing)]
            else:  # load and serving take no shape
                shapes = [{}]
            for shape in shapes:
                for gpu, gpu_memory in self._targets():
                    out.append(Scenario(mode=mode, device=self.device, gpu=gpu, gpu_memory=gpu_memory, **shape))
        return out

    def estimate_kwargs(self, scenario: Scenario) -> dict[str, Any]:
        """Every keyword of the ``estimate()`` call for ``scenario`` except the model and revision."""
        threads = {"cpu_threads": self.cpu_threads} if self.device == "cpu" and self.cpu_threads is not None else {}
        return {"library": self.library, "dtypes": None if self.dtypes is None else list(self.dtypes), **self.extra,
                **threads, **scenario.estimate_kwargs()}

    def check(self) -> None:
        """Refuse a grid the estimator would refuse for every model (``BadOptionError`` and kin), before any work."""
        if not self.modes:
            raise ValueError("no modes")
        for scenario in self.scenarios():
            kwargs = self.estimate_kwargs(scenario)
            kwargs.pop("timeout", None)
            target_gpu(parse_options(**kwargs))  # an unknown GPU name or a malformed size is refused too

    def key(self) -> str:
        """A digest of everything that shapes the answers: equal grids, equal keys."""
        text = json.dumps({"v": GRID_VERSION, **asdict(self)}, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()
