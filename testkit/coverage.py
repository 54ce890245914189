"""One model type of transformers' registry through the estimator, against a real CPU build.

Shared by ``bench/coverage.py`` (the whole registry) and ``tests/test_coverage.py`` (a fixed sample).

For a ``model_type``: its main task class (:func:`task_class`), a small config derived from its
default config by :func:`shrink` (the rule is in its docstring), the model built for real on the
CPU from that config (saved and loaded back with ``from_pretrained(dtype=float32)``, its parameter
and buffer storages counted as ``tests/test_exact_bytes.py`` counts them), then the estimator the
public way — ``estimate(folder)`` on a folder holding only that config.json — in modes load,
inference and training. :func:`run_type` returns one plain dict per type (the bench's row). A model whose
BatchNorm refuses a batch of one in training (the real run fails too; the estimator refuses with that
reason) is trained at batch 2, and its training entry says so (``batch_size``, ``refused_at_batch_1``).
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import tempfile
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

from testkit.shrink_rule import EXPERT_KEYS, MAX_PARAMS, shrink

# ---------------------------------------------------------------------------------------------
# Task class and category
# ---------------------------------------------------------------------------------------------

# (task, mapping name in transformers.models.auto.modeling_auto), first match wins. Seq2seq and
# masked LM come before causal LM: Whisper, BART and Marian are also in the causal-LM mapping (their
# decoder alone), BERT and RoBERTa too (BertLMHeadModel); their published class is the other one.
TASKS = (
    ("image-text-to-text", "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES"),
    ("speech-seq2seq", "MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES"),
    ("seq2seq", "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES"),
    ("masked-lm", "MODEL_FOR_MASKED_LM_MAPPING_NAMES"),
    ("causal-lm", "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES"),
    ("image-classification", "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES"),
    ("base", "MODEL_MAPPING_NAMES"),
)
SPEECH_MAPPINGS = ("MODEL_FOR_CTC_MAPPING_NAMES", "MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES", "MODEL_FOR_TEXT_TO_WAVEFORM_MAPPING_NAMES",
                   "MODEL_FOR_TEXT_TO_SPECTROGRAM_MAPPING_NAMES", "MODEL_FOR_AUDIO_XVECTOR_MAPPING_NAMES")
VISION_MAPPINGS = ("MODEL_FOR_IMAGE_MAPPING_NAMES", "MODEL_FOR_BACKBONE_MAPPING_NAMES", "MODEL_FOR_OBJECT_DETECTION_MAPPING_NAMES",
                   "MODEL_FOR_IMAGE_SEGMENTATION_MAPPING_NAMES", "MODEL_FOR_SEMANTIC_SEGMENTATION_MAPPING_NAMES",
                   "MODEL_FOR_DEPTH_ESTIMATION_MAPPING_NAMES", "MODEL_FOR_VIDEO_CLASSIFICATION_MAPPING_NAMES",
                   "MODEL_FOR_MASK_GENERATION_MAPPING_NAMES", "MODEL_FOR_KEYPOINT_DETECTION_MAPPING_NAMES")
HYBRID_WORDS = ("mamba", "rwkv", "xlstm", "recurrent", "lfm2", "jamba", "zamba", "bamba", "falcon_h1", "hymba", "nemotron_h",
                "granitemoehybrid", "qwen3_next", "minimax", "plamo2", "kimi_linear", "olmo_hybrid")
HYBRID_KEYS = ("ssm_state_size", "mamba_d_state", "state_size", "linear_num_key_heads", "conv_L_cache", "mamba_n_heads")
CATEGORIES = ("text decoder", "VLM", "speech", "encoder", "vision", "hybrid/SSM", "MoE", "other")


def task_class(model_type: str) -> tuple[str, str] | None:
    """``(task, class name)`` of the first mapping of :data:`TASKS` that holds ``model_type``."""
    from transformers.models.auto import modeling_auto

    for task, mapping in TASKS:
        name = getattr(modeling_auto, mapping).get(model_type)
        if isinstance(name, (list, tuple)):
            name = name[0]
        if name:
            return task, name
    return None


def _in_mapping(model_type: str, mappings: tuple[str, ...]) -> bool:
    from transformers.models.auto import modeling_auto

    return any(model_type in getattr(modeling_auto, m, {}) for m in mappings)


def _keys(d: dict[str, Any]) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in d.items():
        if isinstance(value, dict):
            for k, v in _keys(value).items():
                flat.setdefault(k, v)
        else:
            flat.setdefault(key, value)
    return flat


def category(model_type: str, task: str, config: dict[str, Any]) -> str:
    """One of :data:`CATEGORIES`, from the type's task, mappings and config keys (first match:
    hybrid/SSM, MoE, VLM, speech, vision, encoder, text decoder)."""
    flat = _keys(config)
    layer_kinds = {str(v) for key in ("layer_types", "layers_block_type", "block_types") for v in (flat.get(key) or [])}
    if any(w in model_type for w in HYBRID_WORDS) or any(k in flat for k in HYBRID_KEYS) \
            or any(w in kind for kind in layer_kinds for w in ("mamba", "linear", "conv", "ssm", "recurrent", "rnn")):
        return "hybrid/SSM"
    if any(isinstance(flat.get(k), int) and flat[k] > 1 for k in EXPERT_KEYS):
        return "MoE"
    if task == "image-text-to-text" or _in_mapping(model_type, ("MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES",)) \
            or ("vision_config" in config and "text_config" in config):
        return "VLM"
    if task == "speech-seq2seq" or _in_mapping(model_type, SPEECH_MAPPINGS) or "audio_config" in config or "num_mel_bins" in flat:
        return "speech"
    if task == "image-classification" or _in_mapping(model_type, VISION_MAPPINGS) or ("image_size" in flat and "vocab_size" not in flat):
        return "vision"
    if task == "masked-lm" or (task == "base" and "vocab_size" in flat):
        return "encoder"
    if task in ("causal-lm", "seq2seq"):
        return "text decoder"
    return "other"


# ---------------------------------------------------------------------------------------------
# Failure causes
# ---------------------------------------------------------------------------------------------

def cause(text: str) -> str:
    """A failure message normalised to a cause: numbers, quoted names, shapes and paths taken out."""
    text = text.strip().splitlines()[0] if text.strip() else "?"
    text = re.sub(r"/[\w./+-]+", "<path>", text)
    text = re.sub(r"'([^']*)'|\"([^\"]*)\"|`([^`]*)`", _quoted, text)
    text = re.sub(r"\[[\d, ]*\]|\([\d, ]*\)", "[…]", text)
    text = re.sub(r"0x[0-9a-f]+|\d+(\.\d+)?", "N", text)
    text = re.sub(r"\b[A-Z]\w+(For\w+|Model|Config)\b", "<Class>", text)
    return re.sub(r"\s+", " ", text)[:140]


def _quoted(m: re.Match[str]) -> str:
    """A quoted field or attribute name stays (it is the cause); class names, values and code go."""
    inner = next(g for g in m.groups() if g is not None)
    return f"'{inner}'" if re.fullmatch(r"[a-z_][a-z0-9_]{0,40}|NoneType|tuple|list|dict", inner) else "'…'"


def _formula_reason(notes: tuple[str, ...] | list[str]) -> str:
    for note in notes:
        m = re.match(r"simulation failed \((.*)\); formula used", note, re.S)
        if m:
            return m.group(1)
    return "formula without a failure note"


# ---------------------------------------------------------------------------------------------
# One type
# ---------------------------------------------------------------------------------------------

def small_config(model_type: str, *, meta_only: bool = False) -> tuple[dict[str, Any] | None, str, Any, int | None, str | None]:
    """``(config dict as saved, class name, real model, level, reason)``: the first level of
    :func:`shrink` whose config builds for real on the CPU with at most :data:`MAX_PARAMS`
    parameters; ``None`` and the reason where none does. ``meta_only``: the first level whose config
    builds on the meta device, that meta model in place of the real one (cheap: nothing is allocated)."""
    import torch
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    found = task_class(model_type)
    if found is None:
        return None, "", None, None, "no model class in the auto mappings"
    task, name = found
    cls = getattr(transformers, name, None)
    if cls is None:
        return None, name, None, None, f"{name} is not exported by transformers"
    try:
        default = CONFIG_MAPPING[model_type]().to_dict()
    except Exception as exc:  # noqa: BLE001 - a default config the library cannot make is a skip reason
        return None, name, None, None, f"default config: {type(exc).__name__}: {exc}"
    try:
        default_layers = _layer_kinds(CONFIG_MAPPING[model_type]())
    except Exception:  # noqa: BLE001 - a default config without layer kinds
        default_layers = []
    reasons: list[str] = []
    for level, recompute in ((1, True), (1, False), (2, True), (2, False), (3, True), (3, False)):
        shrunk = _follow_validator(_derive(shrink(default, level, recompute_layer_types=recompute), CONFIG_MAPPING[model_type], level),
                                   CONFIG_MAPPING[model_type])
        shrunk["architectures"] = [name]
        # a hybrid with no attention layer left keeps one (two: Zamba's shared block is tied across
        # its attention layers), else the plain shrunk config (Qwen4Exp's default cannot build its attention layer)
        tries = []
        for n in (1, 2):
            small = copy.deepcopy(shrunk)
            try:
                if _keep_attention(small, CONFIG_MAPPING[model_type].from_dict(dict(small)), default, default_layers, n):
                    tries.append(small)
            except Exception:  # noqa: BLE001 - a config that does not build: the plain try below says why
                break
        tries.append(shrunk)
        for small in tries:
            try:
                hf_config = CONFIG_MAPPING[model_type].from_dict(dict(small))
                with torch.device("meta"):
                    meta = cls._from_config(hf_config, dtype=torch.float32)
                params = sum(p.numel() for p in meta.parameters())
                if params > MAX_PARAMS:
                    reasons.append(f"level {level}: {params:,} parameters (more than {MAX_PARAMS:,})")
                    continue
                if _fit_mrope(small, meta):  # the rotary sections follow the smaller head dim
                    hf_config = CONFIG_MAPPING[model_type].from_dict(dict(small))
                    if meta_only:
                        with torch.device("meta"):
                            meta = cls._from_config(hf_config, dtype=torch.float32)
                if meta_only:
                    return small, name, meta, level, None
                del meta
                torch.manual_seed(0)
                model = cls._from_config(hf_config, dtype=torch.float32)
                return small, name, model, level, None
            except Exception as exc:  # noqa: BLE001 - why this level does not build is the skip reason
                reasons.append(f"level {level}: {type(exc).__name__}: {str(exc)[:200]}")
    unique = list(dict.fromkeys(reasons))
    return None, name, None, None, "; ".join(unique)


# a config validator's rule between two widths: "`a.b` (128) must equal `c.d // 4` (16)" (FunASR-Nano, Pocket TTS, Nemotron 3)
_EQUAL_RULE = re.compile(r"`([\w.]+)` \((\d+)\) must (?:equal|match) (?:the [\w ]+)?`([\w.]+)(?: // \d+)?` \((\d+)\)")


def _follow_validator(small: dict[str, Any], config_class: Any, tries: int = 4) -> dict[str, Any]:
    """Where the config class's own validator says a width must equal another (a sub-config's width
    its projection reads), the first key takes the value the validator names, as the library's rule
    says; up to ``tries`` rules. Any other error is left to the build (the skip reason)."""
    for _ in range(tries):
        try:
            config_class.from_dict(dict(small))
            return small
        except Exception as exc:  # noqa: BLE001 - only a stated equality rule is followed
            found = _EQUAL_RULE.search(str(exc))
            if found is None:
                return small
            *parents, key = found.group(1).split(".")
            target = _resolve(small, parents)
            if not isinstance(target, dict) or key not in target or target[key] == int(found.group(4)):
                return small
            target[key] = int(found.group(4))
    return small


def _resolve(d: dict[str, Any], path: list[str]) -> dict[str, Any] | None:
    """The dict at ``path`` from ``d`` or from the first sub-config that holds it (a validator names paths from its own config)."""
    target: Any = d
    for part in path:
        target = target.get(part) if isinstance(target, dict) else None
    if isinstance(target, dict):
        return target
    for value in d.values():
        found = _resolve(value, path) if isinstance(value, dict) and path else None
        if found is not None:
            return found
    return None


DERIVED_KEYS = ("codebook_dim",)  # widths a config derives from others when None (EnCodec, X-Codec: the hidden size)


def _derive(small: dict[str, Any], config_class: Any, level: int) -> dict[str, Any]:
    """At level 1, the keys of :data:`DERIVED_KEYS` whose config class defaults them to None (it then
    derives them from the shrunk widths) set to None."""
    fields = getattr(config_class, "__dataclass_fields__", {})
    for key in DERIVED_KEYS:
        if level == 1 and key in small and key in fields and fields[key].default is None:
            small[key] = None
    return small


def _layer_kinds(hf_config: Any) -> list[str]:
    """The text config's per-layer kinds (``layer_types``: ``full_attention``, ``linear_attention``, ``conv``...)."""
    text = hf_config.get_text_config() if hasattr(hf_config, "get_text_config") else hf_config
    kinds = getattr(text, "layer_types", None)
    return [str(k) for k in kinds] if isinstance(kinds, (list, tuple)) else []


def _is_attention(kind: str) -> bool:
    return kind == "hybrid" or ("attention" in kind and kind != "linear_attention")


def _keep_attention(small: dict[str, Any], hf_config: Any, default: dict[str, Any], default_kinds: list[str], count: int = 1) -> bool:
    """A hybrid whose small config has no attention layer left keeps one, as its checkpoints have
    (transformers' own ``generate`` fails on a cache with no attention layer): the layer count is
    raised to the default config's first attention layer (its pattern kept, ``layer_types``
    recomputed); where the default has none (Bamba, GraniteMoeHybrid: the placement is per
    checkpoint), the last layer is made an attention layer. ``True`` when ``small`` was changed."""
    kinds = _layer_kinds(hf_config)
    if not kinds or any(_is_attention(k) for k in kinds):
        return False
    target: Any = small.get("text_config") if isinstance(small.get("text_config"), dict) else small
    key = next((k for k in ("num_hidden_layers", "n_layer", "num_layers") if isinstance(target.get(k), int)), None)
    if key is None:
        return False
    found = [i for i, k in enumerate(default_kinds) if _is_attention(k)]
    first = found[count - 1] if len(found) >= count else None
    if first is not None:
        if first + 1 <= target[key]:
            return False
        old = target[key]
        target[key] = first + 1
        full: Any = default.get("text_config") if isinstance(default.get("text_config"), dict) else default
        for name, value in list(target.items()):  # per-layer lists cut to the old count: the default's, cut to the new one
            if isinstance(value, list) and len(value) == old and isinstance(full.get(name), list) and len(full[name]) > first:
                target[name] = full[name][: first + 1]
        return True
    if found or count > 1:
        return False
    if "attn_layer_indices" in target:
        target["attn_layer_indices"] = [target[key] - 1]
        return True
    if "layer_types" in target and default_kinds and set(default_kinds) == {"linear_attention"} and "num_attention_heads" in target:
        target["layer_types"] = ["linear_attention"] * (target[key] - 1) + ["full_attention"]
        return True
    return False


def _fit_mrope(small: dict[str, Any], meta: Any) -> bool:
    """Multimodal rotary sections (``mrope_section``, default ``[16, 24, 24]`` for a head dim of 128)
    scaled to add up to the small head dim's ``head_dim / 2``, in the text config's ``rope_parameters``."""
    for module in meta.modules():
        section, inv_freq = getattr(module, "mrope_section", None), getattr(module, "inv_freq", None)
        if isinstance(section, (list, tuple)) and inv_freq is not None and sum(section) != inv_freq.shape[-1]:
            half = int(inv_freq.shape[-1])
            scaled = [max(1, round(s * half / sum(section))) for s in section]
            scaled[-1] += half - sum(scaled)
            target: Any = small.get("text_config") if isinstance(small.get("text_config"), dict) else small
            rope = dict(target.get("rope_parameters") or {"rope_type": "default", "rope_theta": 10000.0})
            rope["mrope_section"] = scaled
            target["rope_parameters"] = rope
            return True
    return False


def run_type(model_type: str, *, seq_len: int = 32, workdir: Path | None = None) -> dict[str, Any]:
    """The bench row of one ``model_type`` (plain data, JSON-ready)."""
    warnings.filterwarnings("ignore")
    found = task_class(model_type)
    row: dict[str, Any] = {"model_type": model_type, "task": found[0] if found else None, "class": found[1] if found else None}
    started = time.perf_counter()
    small, name, model, level, reason = small_config(model_type)
    row["build_s"] = round(time.perf_counter() - started, 2)
    try:
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING

        row["category"] = category(model_type, row["task"] or "base", CONFIG_MAPPING[model_type]().to_dict())
    except Exception:  # noqa: BLE001 - the category of a type whose default config fails
        row["category"] = "other"
    if small is None:
        row.update(status="skipped", skip_reason=reason)
        return row
    row["level"] = level
    tmp = Path(tempfile.mkdtemp(prefix=f"coverage_{model_type}_", dir=workdir))
    try:
        return _measure(row, model, small, tmp, seq_len)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _measure(row: dict[str, Any], model: Any, small: dict[str, Any], tmp: Path, seq_len: int) -> dict[str, Any]:
    """The real build's bytes, then ``estimate()`` in each mode on a folder holding only the config."""
    import torch

    from estimator import estimate
    from estimator.errors import EstimatorError
    from testkit.truth import storage_bytes

    saved, folder = tmp / "saved", tmp / "config_only"
    folder.mkdir()
    truth_how = "from_pretrained"
    try:
        model.save_pretrained(saved)
        real = type(model).from_pretrained(saved, dtype=torch.float32)
        config_json = json.loads((saved / "config.json").read_text())
    except Exception as exc:  # noqa: BLE001 - a model that cannot round-trip: counted as built
        real, truth_how = model, f"_from_config (save/load failed: {type(exc).__name__})"
        config_json = dict(small)
    row["truth_bytes"] = storage_bytes(real)
    row["truth_how"] = truth_how
    row["params"] = sum(p.numel() for p in real.parameters())
    del real, model
    (folder / "config.json").write_text(json.dumps(config_json))
    row["config"] = config_json
    for mode in ("load", "inference", "training"):
        t0 = time.perf_counter()
        entry: dict[str, Any] = {}
        try:
            try:
                result = estimate(str(folder), dtypes=["float32"], mode=mode, seq_len=seq_len)
            except EstimatorError as exc:
                if not _batch_one(mode, exc):
                    raise
                # the model's BatchNorm refuses a batch of one in training, as the real run does (the estimator
                # says so, estimator/peak/sim/batchnorm.py): the step a user can run is the one at batch 2
                entry.update(batch_size=2, refused_at_batch_1=str(exc)[:300])
                result = estimate(str(folder), dtypes=["float32"], mode=mode, seq_len=seq_len, batch_size=2)
            r = result.row("float32")
            if mode == "load":
                entry.update(method=r.method, bytes=r.total_bytes, exact=r.total_bytes == row["truth_bytes"])
                entry["status"] = "ok" if entry["exact"] else "mismatch"
            else:
                entry.update(method=r.method, bytes=r.peak_bytes, inputs=simulated_inputs(r.notes))
                if r.peak_bytes is None:
                    entry.update(status="null", cause=cause("; ".join(r.notes) or "peak_bytes is null"))
                elif r.method == "simulated":
                    entry["status"] = "ok"
                else:
                    reason_text = _formula_reason(r.notes)
                    entry.update(status="formula", detail=reason_text[:500], cause=cause(reason_text))
        except EstimatorError as exc:
            entry.update(status="refused", error=type(exc).__name__, detail=str(exc)[:500],
                         cause=f"{type(exc).__name__}: {cause(str(exc))}")
        except Exception as exc:  # noqa: BLE001 - an internal error is what the bench counts
            entry.update(status="error", error=type(exc).__name__, detail=str(exc)[:500],
                         cause=f"internal {type(exc).__name__}: {cause(str(exc))}",
                         where=_where(traceback.format_exc()))
        entry["seconds"] = round(time.perf_counter() - t0, 2)
        row[mode] = entry
    row["status"] = "done"
    return row


def _batch_one(mode: str, exc: Exception) -> bool:
    """The estimator's refusal of training at batch 1 for a model whose BatchNorm sees one value per channel."""
    return mode == "training" and getattr(exc, "option", None) == "batch_size" and "one value per channel" in str(exc)


def _where(tb: str) -> str:
    """The innermost frame of the estimator in a traceback."""
    frames = re.findall(r'File "([^"]*/estimator/[^"]*)", line (\d+), in (\w+)', tb)
    if not frames:
        return ""
    path, line, func = frames[-1]
    return f"{path.split('/estimator/')[-1]}:{line} {func}"


def simulated_inputs(notes: tuple[str, ...] | list[str]) -> str:
    """What a simulated step was fed, from its notes (estimator.peak.inputs.prompts.media and the workloads word them:
    image tokens or ``pixel_values``; seconds of audio, ``input_values`` or ``input_features``; a protein's
    ``protein_input_ids``, estimator.peak.inputs.other.protein): "images", "audio", "protein + text", "text only (fallback)"
    where the model refused its media inputs, else "text"."""
    text = " ".join(notes)
    if "images or audio not simulated" in text:
        return "text only (fallback)"
    if "protein_input_ids" in text:
        return "protein + text"
    if " image tokens + " in text or "pixel_values" in text:
        return "images"
    if " s of audio at " in text or "input_values" in text or "input_features" in text:
        return "audio"
    return "text"
