"""Which quantization scheme vLLM loads a model's weights with, and the sentence that says so (serving rows).

vLLM takes the scheme from the checkpoint's ``quantization_config`` (``quant_method``), or from ``--quantization``
for an unquantized one (``vllm/config/model.py``, ``ModelConfig._verify_quantization``), and then lets each
registered method claim it (``override_quantization_method``): GPTQ and AWQ checkpoints whose layout Marlin runs
are served by ``gptq_marlin`` / ``awq_marlin`` (``GPTQMarlinConfig.is_gptq_marlin_compatible``: 4 or 8 bits,
symmetric, ``bits``, ``group_size``, ``sym`` and ``desc_act`` all stated; ``AWQMarlinConfig.is_awq_marlin_compatible``:
4 bits with zero points; both through ``check_marlin_supported``: group size -1, 32, 64 or 128 and compute capability
7.5 or more, ``query_marlin_supported_quant_types``). FP8 weights on a GPU below compute capability 8.9 run
weight-only through the Marlin kernel (``Fp8LinearMethod``: ``use_marlin = not has_device_capability(89)``).
The scheme's own memory is the weights' (``estimator.serving.weights``); this module only names it.
"""

from __future__ import annotations

from typing import Any

MARLIN_GROUPS = (-1, 32, 64, 128)  # MARLIN_SUPPORTED_GROUP_SIZES
MARLIN_MIN_CAPABILITY = 75  # query_marlin_supported_quant_types: no Marlin type below sm75
FP8_NATIVE_CAPABILITY = 89


def _capability(text: str | None) -> int | None:
    if not text:
        return None
    major, _, minor = text.partition(".")
    return int(major) * 10 + int(minor or 0)


def _get(qc: Any, key: str) -> Any:
    return qc.get(key) if isinstance(qc, dict) else getattr(qc, key, None)


def vllm_scheme(config: Any, quantization: str, capability: str | None) -> tuple[str, str]:
    """``(scheme, sentence)``: the method vLLM serves the weights with (``"none"`` unquantized) and why.

    ``quantization``: ``--quantization`` (``"none"`` or ``"fp8"``); ``capability``: the GPU's, ``"8.9"``.
    """
    cap = _capability(capability)
    qc = getattr(config, "quantization_config", None)
    if qc is None:
        if quantization == "none":
            return "none", "vLLM loads the weights unquantized, in the row's dtype (no quantization_config, no --quantization)"
        scheme, source = quantization, f"--quantization {quantization}: quantized while loading"
    else:
        method = _get(qc, "quant_method")
        scheme = str(getattr(method, "value", method) or "unknown").lower()
        source = f"the checkpoint's quantization_config ({scheme})"
    bits, group = _get(qc, "bits") if qc is not None else None, _get(qc, "group_size") if qc is not None else None
    marlin_gpu = cap is not None and cap >= MARLIN_MIN_CAPABILITY
    if scheme == "gptq" and marlin_gpu and bits in (4, 8) and _get(qc, "sym") is True and group in MARLIN_GROUPS \
            and _get(qc, "desc_act") is not None:
        return "gptq_marlin", f"vLLM loads the weights as gptq_marlin ({source}, {bits} bits, group {group}: Marlin runs it on compute capability {capability})"
    if scheme == "awq" and marlin_gpu and bits == 4 and _get(qc, "zero_point") is not False and group in MARLIN_GROUPS:
        return "awq_marlin", f"vLLM loads the weights as awq_marlin ({source}, 4 bits, group {group}: Marlin runs it on compute capability {capability})"
    if scheme == "fp8" and cap is not None and cap < FP8_NATIVE_CAPABILITY:
        return "fp8", (f"vLLM loads the weights as fp8 ({source}); compute capability {capability} has no FP8 units, so vLLM runs "
                       "them weight-only through the Marlin kernel")
    return scheme, f"vLLM loads the weights as {scheme} ({source})"
