"""diffusers pipelines: per-component bytes against real CPU loads, and SDXL's own figures offline.

Truth for a small SDXL-shaped pipeline: each component saved with real weights, then loaded the
way a user does (``cls.from_pretrained(folder, subfolder, torch_dtype=X)``) and every distinct
tensor storage counted. The real SDXL is too big to materialise here; its meta build is checked
against the published parameter counts of the SDXL base 1.0 checkpoint.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import diffusers
import pytest
import torch
import transformers

from estimator import estimate
from estimator.load.pipelines import pipeline_parts
from estimator.options import DType, Library
from estimator.source.reference import parse_reference
from estimator.source.resolve import resolve_local
from testkit.truth import storage_bytes

FIXTURES = Path(__file__).resolve().parents[1] / "estimator" / "source" / "catalog" / "data" / "stabilityai__stable-diffusion-xl-base-1.0"


def _small_sdxl(root: Path) -> dict[str, torch.nn.Module]:
    """SDXL's model_index and configs with every size shrunk; components built for real on CPU."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(FIXTURES / "model_index.json", root / "model_index.json")
    (root / "scheduler").mkdir()
    shutil.copy(FIXTURES / "scheduler" / "scheduler_config.json", root / "scheduler" / "scheduler_config.json")
    torch.manual_seed(0)
    unet_config = json.loads((FIXTURES / "unet" / "config.json").read_text())
    unet_config.update(
        block_out_channels=[32, 64, 64], transformer_layers_per_block=[1, 1, 2], attention_head_dim=[2, 4, 4],
        layers_per_block=1, cross_attention_dim=64, addition_time_embed_dim=8, projection_class_embeddings_input_dim=8 * 6 + 32,
        sample_size=16,
    )
    vae_config = json.loads((FIXTURES / "vae" / "config.json").read_text())
    vae_config.update(block_out_channels=[32, 64], down_block_types=vae_config["down_block_types"][:2],
                      up_block_types=vae_config["up_block_types"][:2], layers_per_block=1, sample_size=32)
    te_config = json.loads((FIXTURES / "text_encoder" / "config.json").read_text())
    te_config.update(hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4, vocab_size=1000, projection_dim=32)
    te2_config = json.loads((FIXTURES / "text_encoder_2" / "config.json").read_text())
    te2_config.update(hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4, vocab_size=1000, projection_dim=32)
    built = {
        "unet": diffusers.UNet2DConditionModel.from_config(unet_config),
        "vae": diffusers.AutoencoderKL.from_config(vae_config),
        "text_encoder": transformers.CLIPTextModel(transformers.CLIPTextConfig.from_dict(te_config)),
        "text_encoder_2": transformers.CLIPTextModelWithProjection(transformers.CLIPTextConfig.from_dict(te2_config)),
    }
    for name, module in built.items():
        module.save_pretrained(root / name)
    return built


@pytest.fixture(scope="module")
def small_pipeline(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sdxl-small") / "pipe"
    _small_sdxl(root)
    return root


LOADERS = {
    "unet": lambda path, dtype: diffusers.UNet2DConditionModel.from_pretrained(path, subfolder="unet", torch_dtype=dtype),
    "vae": lambda path, dtype: diffusers.AutoencoderKL.from_pretrained(path, subfolder="vae", torch_dtype=dtype),
    "text_encoder": lambda path, dtype: transformers.CLIPTextModel.from_pretrained(path, subfolder="text_encoder", dtype=dtype),
    "text_encoder_2": lambda path, dtype: transformers.CLIPTextModelWithProjection.from_pretrained(path, subfolder="text_encoder_2", dtype=dtype),
}


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_small_pipeline_components_equal_real_loads(small_pipeline: Path, dtype: str) -> None:
    torch_dtype = getattr(torch, dtype)
    real = {name: storage_bytes(load(str(small_pipeline), torch_dtype)) for name, load in LOADERS.items()}
    resolved = resolve_local(parse_reference(str(small_pipeline)), Library.AUTO)
    assert resolved.library is Library.DIFFUSERS
    parts = {part.name: part.total_bytes for part in pipeline_parts(resolved, DType(dtype))}
    assert parts == real  # schedulers and tokenizers contribute nothing
    result = estimate(str(small_pipeline), dtypes=[dtype])
    assert result.library == "diffusers" and result.architecture == "StableDiffusionXLPipeline"
    row = result.row(dtype)
    assert row.total_bytes == sum(real.values())
    assert "unet (UNet2DConditionModel)" in row.notes[0]


def test_single_component_repo(small_pipeline: Path) -> None:
    """A repo holding one model (config.json with _class_name) is estimated alone."""
    result = estimate(str(small_pipeline / "vae"), dtypes=["float16"])
    assert result.library == "diffusers" and result.architecture == "AutoencoderKL"
    assert result.row("float16").total_bytes == storage_bytes(LOADERS["vae"](str(small_pipeline), torch.float16))


# Parameter counts of stabilityai/stable-diffusion-xl-base-1.0 as published (the Hub's safetensors
# metadata of each component's diffusion_pytorch_model / model safetensors; the SDXL report's "2.6B UNet").
SDXL_PARAMETERS = {"unet": 2_567_463_684, "vae": 83_653_863, "text_encoder": 123_060_480, "text_encoder_2": 694_659_840}


def test_sdxl_offline_from_fixture_configs() -> None:
    resolved = resolve_local(parse_reference(str(FIXTURES)), Library.AUTO)
    parts = {part.name: part for part in pipeline_parts(resolved, DType.FLOAT16)}
    assert set(parts) == set(SDXL_PARAMETERS)
    position_ids = 77 * 8  # the CLIP text encoders' int64 position_ids buffer
    for name, params in SDXL_PARAMETERS.items():
        buffers = position_ids if name.startswith("text_encoder") else 0
        assert parts[name].total_bytes == 2 * params + buffers, name
    row = estimate(str(FIXTURES), dtypes=["float16"]).row("float16")
    assert row.total_bytes == sum(p.total_bytes for p in parts.values())
