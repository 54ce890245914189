"""The CPU allocator's real peak of pre-quantized checkpoints, loaded and run as a user's script does.

``python -m testkit.prequant_truth CASE KIND`` prints one JSON line with ``peak_bytes``: the maximum "Total
Allocated" of ``torch.profiler``'s memory events inside the work's window (run it in a fresh process). The tiny
model of the case (:data:`testkit.quant_truth.QUANT_CASES`, random weights) is quantized for real on CPU and saved
as a pre-quantized checkpoint before profiling (:func:`make_checkpoint`); inside the profiled region it is loaded
with ``from_pretrained(tmp, dtype=torch.bfloat16)`` (transformers picks the quantizer from the checkpoint's
``quantization_config``), every tensor is made resident (:func:`resident`), then, in the window, ``generate(input_ids, max_new_tokens=32, min_new_tokens=32)``
(greedy, prefill and 32 decode steps). Kinds (:data:`KINDS`):

- ``ct_w4a16``: compressed-tensors ``pack-quantized`` int4 weights, groups of 32, symmetric (llm-compressor's
  GPTQ / W4A16 output format): compressed-tensors' own ``apply_quantization_config`` and
  ``ModelCompressor.compress_model`` pack the weights;
- ``ct_fp8``: compressed-tensors float8_e4m3fn weights, one scale per output channel (FP8 W8A16), stored
  ``naive-quantized`` (the format compressed-tensors 0.20 infers for it), compressed the same way;
- ``fp8_block``: transformers' FineGrainedFP8 layout (DeepSeek-V3/R1's): float8_e4m3fn weights and float32
  ``weight_scale_inv`` per 128 x 128 block, written with torch; on CPU transformers dequantizes it while loading;
- ``mxfp4``: gpt-oss's layout, on the gpt-oss cases only (:data:`MXFP4_CASES`, :func:`cases_for`): each MoE
  expert tensor stored as ``*_blocks`` (4-bit e2m1 values, two per uint8, 32 per block) and ``*_scales`` (one
  e8m0 uint8 exponent per block), written with torch (:func:`mxfp4_blocks`); the rest in bfloat16. On CPU
  transformers' ``Mxfp4HfQuantizer`` dequantizes the experts while loading;
- ``ao_int8`` / ``ao_int4``: torchao ``Int8WeightOnlyConfig`` (per row) and ``IntxWeightOnlyConfig`` (int4, groups
  of 32, ``unpacked_to_int8``), quantized by torchao itself through transformers' ``TorchAoConfig`` and saved with
  ``save_pretrained`` (:func:`_torchao`); loaded, each quantized weight is torchao's tensor subclass.

Nothing here calls the estimator's quantization code; :func:`simulate` is the estimator's answer.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from testkit.checkpoint_truth import answer, checkpoint_peak, generate_window, meta_bf16
from testkit.peak_cases import PeakCase
from testkit.quant_truth import QUANT_CASES

_WORK = "prequant_work"
NEW_TOKENS = 32
GROUP = 32  # the small cases' hidden size is 64: groups of 32 divide every Linear's input

_CT_COMMON = {"quant_method": "compressed-tensors", "quantization_status": "compressed", "ignore": ["lm_head"],
              "kv_cache_scheme": None, "sparsity_config": {}, "transform_config": {}}
_AO_COMMON = {"quant_method": "torchao", "include_input_output_embeddings": False, "modules_to_not_convert": None,
              "untie_embedding_weights": False}
QUANTIZATION_CONFIGS: dict[str, dict[str, Any]] = {
    "ct_w4a16": {**_CT_COMMON, "format": "pack-quantized", "config_groups": {"group_0": {
        "format": "pack-quantized", "targets": ["Linear"], "input_activations": None, "output_activations": None,
        "weights": {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group", "group_size": GROUP,
                    "dynamic": False}}}},
    "ct_fp8": {**_CT_COMMON, "format": "naive-quantized", "config_groups": {"group_0": {
        "format": "naive-quantized", "targets": ["Linear"], "input_activations": None, "output_activations": None,
        "weights": {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "channel", "dynamic": False}}}},
    "fp8_block": {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3", "weight_block_size": [128, 128]},
    # torchao 0.18 through transformers' TorchAoConfig, as save_pretrained writes it into config.json
    "ao_int8": {**_AO_COMMON, "quant_type": {"default": {"_type": "Int8WeightOnlyConfig", "_version": 2, "_data": {
        "granularity": {"_type": "PerRow", "_version": 1, "_data": {"dim": -1}}, "group_size": None,
        "set_inductor_config": True}}}},
    "ao_int4": {**_AO_COMMON, "quant_type": {"default": {"_type": "IntxWeightOnlyConfig", "_version": 2, "_data": {
        "granularity": {"_type": "PerGroup", "_version": 1, "_data": {"group_size": GROUP}},
        "intx_choose_qparams_algorithm": {"_type": "IntxChooseQParamsAlgorithm", "_data": "AFFINE"},
        "intx_packing_format": {"_type": "IntxPackingFormat", "_data": "UNPACKED_TO_INT8"},
        "mapping_type": {"_type": "MappingType", "_data": "SYMMETRIC"}, "scale_dtype": None,
        "weight_dtype": {"_type": "torch.dtype", "_data": "int4"}}}}},
    # openai/gpt-oss-20b's config.json
    "mxfp4": {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                                                  "model.embed_tokens", "lm_head"]},
}
KINDS = tuple(QUANTIZATION_CONFIGS)


def _gpt_oss(**kw: Any) -> Any:
    def build() -> nn.Module:
        from transformers import AutoConfig, GptOssForCausalLM

        config = AutoConfig.for_model("gpt_oss", hidden_size=64, intermediate_size=64, num_hidden_layers=2, layer_types=None,
                                      num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=1000,
                                      max_position_embeddings=256, rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                                      **kw)
        return GptOssForCausalLM._from_config(config, dtype=torch.float32)

    return build


# gpt-oss small: sliding / full attention layers with sinks, biased projections, a top-k router over biased experts
MXFP4_CASES: dict[str, PeakCase] = {
    "gpt_oss": PeakCase("gpt_oss", "4 experts top-2, sliding window 128 (the whole context)",
                        _gpt_oss(num_local_experts=4, num_experts_per_tok=2)),
    "gpt_oss_swa": PeakCase("gpt_oss_swa", "8 experts top-4, sliding window 32 (shorter than the prompt)",
                            _gpt_oss(num_local_experts=8, num_experts_per_tok=4, sliding_window=32)),
}
FP4_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)  # e2m1, by code


def case_of(case_name: str) -> PeakCase:
    return MXFP4_CASES[case_name] if case_name in MXFP4_CASES else QUANT_CASES[case_name]


def cases_for(kind: str) -> tuple[str, ...]:
    """The cases a kind runs on: mxfp4 is gpt-oss's layout (transformers swaps only ``GptOssMLP``); the others
    quantize the linears of :data:`testkit.quant_truth.QUANT_CASES`."""
    return tuple(MXFP4_CASES) if kind == "mxfp4" else tuple(QUANT_CASES)


def make_checkpoint(case_name: str, kind: str, folder: str) -> None:
    """The case's model (random weights, bfloat16) quantized for real and saved as ``kind``'s checkpoint."""
    torch.manual_seed(0)
    model = case_of(case_name).build().to(torch.bfloat16)  # type: ignore[operator, union-attr]
    if kind == "fp8_block":
        _fp8_block(model, folder)
        return
    if kind == "mxfp4":
        _mxfp4(model, folder)
        return
    if kind.startswith("ao_"):
        _torchao(model, kind, folder)
        return
    from compressed_tensors.compressors import ModelCompressor
    from compressed_tensors.quantization import QuantizationConfig, apply_quantization_config

    qc = QuantizationConfig.model_validate({k: v for k, v in QUANTIZATION_CONFIGS[kind].items()
                                            if k in ("config_groups", "ignore", "format", "quantization_status")}
                                           | {"quantization_status": "initialized"})
    apply_quantization_config(model, qc)
    with torch.no_grad():
        for module in model.modules():  # what a calibration would set: each group's (channel's) absolute maximum
            if hasattr(module, "weight_scale"):
                w = module.weight.float()
                scale = (w.reshape(w.shape[0], -1, GROUP).abs().amax(-1) / 7 if kind == "ct_w4a16"
                         else w.abs().amax(-1, keepdim=True) / torch.finfo(torch.float8_e4m3fn).max)
                module.weight_scale.copy_(scale.clamp(min=1e-6).to(module.weight_scale.dtype))
    compressor = ModelCompressor.from_pretrained_model(model, quantization_format=QUANTIZATION_CONFIGS[kind]["format"])
    compressor.compress_model(model)
    model.save_pretrained(folder)
    _write_quantization_config(folder, QUANTIZATION_CONFIGS[kind])


def _fp8_block(model: nn.Module, folder: str) -> None:
    from safetensors.torch import save_file

    block = 128
    state = {}
    for name, tensor in model.state_dict().items():
        state[name] = tensor.contiguous()
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear) and not name.endswith("lm_head"):
            w = module.weight.detach().float()
            rows, cols = -(-w.shape[0] // block), -(-w.shape[1] // block)
            padded = torch.zeros(rows * block, cols * block)
            padded[: w.shape[0], : w.shape[1]] = w
            tiles = padded.reshape(rows, block, cols, block)
            scale = (tiles.abs().amax(dim=(1, 3)) / torch.finfo(torch.float8_e4m3fn).max).clamp(min=1e-6)
            q = (tiles / scale[:, None, :, None]).reshape(rows * block, cols * block)[: w.shape[0], : w.shape[1]]
            state[f"{name}.weight"] = q.to(torch.float8_e4m3fn).contiguous()
            state[f"{name}.weight_scale_inv"] = scale.contiguous()
    model.config.save_pretrained(folder)  # type: ignore[union-attr]
    if getattr(model.config, "tie_word_embeddings", False):  # type: ignore[union-attr]
        state.pop("lm_head.weight", None)
    save_file(state, str(Path(folder) / "model.safetensors"), metadata={"format": "pt"})
    _write_quantization_config(folder, QUANTIZATION_CONFIGS["fp8_block"])


def mxfp4_blocks(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``weight`` (experts, rows, K) quantized to MXFP4 along K: ``blocks`` (experts, rows, K / 32, 16) uint8, the
    low nibble the even element's e2m1 code, and ``scales`` (experts, rows, K / 32) uint8, the block's power of two
    + 127 (the OCP MX format; what transformers' ``convert_moe_packed_tensors`` reads)."""
    e, rows, k = weight.shape
    groups = weight.float().reshape(e, rows, k // 32, 32)
    exponent = torch.ceil(torch.log2(groups.abs().amax(-1).clamp(min=1e-30) / 6.0)).clamp(-127, 127)
    codes = ((groups / torch.exp2(exponent)[..., None])[..., None] - torch.tensor(FP4_VALUES)).abs().argmin(-1).to(torch.uint8)
    return (codes[..., 0::2] | (codes[..., 1::2] << 4)).contiguous(), (exponent + 127).to(torch.uint8).contiguous()


def _mxfp4(model: nn.Module, folder: str) -> None:
    """gpt-oss's checkpoint layout: ``gate_up_proj`` (E, H, 2I) stored as ``gate_up_proj_blocks`` (E, 2I, H / 32, 16)
    and ``gate_up_proj_scales``, ``down_proj`` (E, I, H) as (E, H, I / 32, 16) and scales; the rest as is."""
    from safetensors.torch import save_file

    state = {}
    for name, tensor in model.state_dict().items():
        if name.endswith(("experts.gate_up_proj", "experts.down_proj")):
            state[f"{name}_blocks"], state[f"{name}_scales"] = mxfp4_blocks(tensor.transpose(1, 2))
        else:
            state[name] = tensor.contiguous()
    model.config.save_pretrained(folder)  # type: ignore[union-attr]
    save_file(state, str(Path(folder) / "model.safetensors"), metadata={"format": "pt"})
    _write_quantization_config(folder, QUANTIZATION_CONFIGS["mxfp4"])


def _torchao(model: nn.Module, kind: str, folder: str) -> None:
    """torchao's own quantization on CPU, as its model cards show it: ``from_pretrained(..., quantization_config=
    TorchAoConfig(config))`` on the bfloat16 checkpoint, then ``save_pretrained`` (safetensors, the torchao
    tensor subclasses flattened into their parts with their metadata)."""
    from transformers import AutoModelForCausalLM, TorchAoConfig

    with tempfile.TemporaryDirectory() as plain:
        model.save_pretrained(plain)  # type: ignore[operator]
        quantized = AutoModelForCausalLM.from_pretrained(plain, dtype=torch.bfloat16,
                                                         quantization_config=TorchAoConfig.from_dict(QUANTIZATION_CONFIGS[kind]))
        quantized.save_pretrained(folder)


def _write_quantization_config(folder: str, qc: dict[str, Any]) -> None:
    path = Path(folder) / "config.json"
    config = json.loads(path.read_text())
    config["quantization_config"] = qc
    config["dtype"] = "bfloat16"
    path.write_text(json.dumps(config, indent=2))


def measure(case_name: str, kind: str) -> dict[str, int]:
    case = case_of(case_name)

    def run(model: Any) -> None:
        if kind == "mxfp4":  # dequantized at load: the experts are GptOssExperts in bfloat16
            experts = model.model.layers[0].mlp.experts
            assert type(experts).__name__ == "GptOssExperts" and experts.gate_up_proj.dtype == torch.bfloat16, experts
        generate_window(model, case, NEW_TOKENS, _WORK)

    return prequant_peak(case_name, kind, run, _WORK)


def prequant_peak(case_name: str, kind: str, run: Callable[[Any], None], work: str, **load_kwargs: Any) -> dict[str, int]:
    """The allocator's peak in ``run``'s ``record_function(work)`` window (:func:`testkit.checkpoint_truth.checkpoint_peak`):
    ``kind``'s checkpoint of the case made before profiling (:func:`make_checkpoint`, then ``torch.manual_seed(0)``);
    inside the profiled region loaded with ``from_pretrained(folder, dtype=torch.bfloat16, **load_kwargs)``, every
    tensor made resident (:func:`resident`), and given to ``run``. The measured side of :func:`measure` and of
    :func:`testkit.prequant_lora_truth.measure`."""
    from transformers import AutoModelForCausalLM

    def write(folder: str) -> None:
        make_checkpoint(case_name, kind, folder)
        torch.manual_seed(0)

    def load(folder: str) -> Any:
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16, **load_kwargs)
        resident(model)
        return model

    return checkpoint_peak(write, load, run, work)


def resident(model: nn.Module) -> None:
    """Copy every parameter and buffer into allocated memory: tensors that the loader took as they are from the
    memory-mapped file (the packed int32 and float8 ones, and any stored in the load dtype) are pages of the file,
    which the CPU allocator never sees; on a GPU, and once read, they are memory like any other. A tensor subclass
    holding others (torchao's quantized weights) gets copies of the tensors it holds (``.data =`` would swap only
    the wrapper, leaving its parts the file's pages)."""
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    with torch.no_grad():
        for tensor in [*model.parameters(), *model.buffers()]:
            if is_traceable_wrapper_subclass(tensor):
                for name in tensor.__tensor_flatten__()[0]:
                    setattr(tensor, name, getattr(tensor, name).clone())
            else:
                tensor.data = tensor.data.clone()


def simulate(case_name: str, kind: str, device: str = "cpu") -> dict[str, Any]:
    """The estimator's simulation of the same run: the case built on meta in bfloat16 from its config alone, with
    the checkpoint's ``quantization_config`` (:mod:`estimator.peak.sim.prequant`)."""
    from estimator.peak import simulate_peak
    from estimator.peak.sim.training import Recipe

    case = case_of(case_name)
    recipe = Recipe(prequantized=json.dumps(QUANTIZATION_CONFIGS[kind], sort_keys=True))
    result = simulate_peak(meta_bf16(case), mode="inference", device=device, batch_size=case.batch_size,  # type: ignore[arg-type]
                           seq_len=case.seq_len, max_new_tokens=NEW_TOKENS, recipe=recipe)
    return answer(result)


if __name__ == "__main__":
    print(json.dumps(measure(sys.argv[1], sys.argv[2])))
