"""Processor families whose images are not a grid of tokens in the prompt (see :mod:`estimator.peak.inputs.prompts.more_families`).

- **Fixed-count prompts**: BLIP-2 and InstructBLIP (the Q-Former's ``num_query_tokens`` image tokens written by
  the processor; InstructBLIP's Q-Former also reads the prompt, through its own tokenizer), InstructBLIP-Video
  (a clip of 4 frames: ``num_query_tokens`` x 4 video tokens), Kosmos-2 (64 image
  positions), Kosmos-2.5 (``latent_query_num``), Florence-2 (one token per cell of DaViT's last stage plus one),
  Idefics (one ``<image>`` per image between ``<fake_token_around_image>``, its perceiver's latents read by
  cross-attention), Step3p7 (a global view and local crops), Phi-4-multimodal (crops of the dynamic HD
  transform).
- **Images beside the text**: BLIP and GIT (the text decoder reads the image features; no image token), the
  TIPS v2 and ModernVBERT/UltraVBERT encoders.
- **Captioners** (``decoder_text``): the image goes to the encoder (Pix2Struct's flattened patches,
  PP-FormulaNet's and the vision-encoder-decoder's pixels) and the text to the decoder as ``labels``: training is
  the caption's loss; inference the encoder and the decoder's first token, as ``generate`` starts.

Each processor is transformers' own class (the auto mapping's, else the one the model's docs use: TrOCR's for a
ViT vision-encoder-decoder), its image processor built from the model config; the tokenizer is the stand-in of
:func:`estimator.peak.inputs.prompts.processors.family_tokenizer`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from estimator.errors import UnsupportedError
from estimator.peak.inputs.prompts.family import Family, family_tokenizer

if TYPE_CHECKING:
    from estimator.peak.inputs.prompts.family import Family

__all__ = ["captioner_families"]

_IMAGE_IDS = ("image_token_id", "image_token_index")


def _vision(config: Any) -> Any:
    return getattr(config, "vision_config", None) or getattr(config, "encoder", None)


def _side(value: Any, default: int = 224) -> int:
    if isinstance(value, (list, tuple)):
        return int(value[0])
    return int(value or default)


def _square(config: Any) -> dict[str, Any]:
    size = _side(getattr(_vision(config), "image_size", None))
    return {"size": {"height": size, "width": size}}


def _clip(config: Any) -> dict[str, Any]:
    size = _side(getattr(_vision(config), "image_size", None))
    return {"size": {"shortest_edge": size}, "crop_size": {"height": size, "width": size}}


def _one_image(name: str, images: list[Any]) -> None:

    if any(len(sample) > 1 for sample in images):
        raise UnsupportedError(f"{name} takes one image per prompt")


def _stand_in(config: Any) -> Any:
    """A second stand-in word-level tokenizer (InstructBLIP's Q-Former reads the prompt through its own)."""

    return family_tokenizer(config, Family(tokens={}, placeholder=""))


def _labels(proc: Any, batch: int, text_len: int) -> Any:
    """The caption a captioner is trained on: ``text_len`` words, as its tokenizer makes them."""
    return proc.tokenizer([" ".join(["a"] * text_len)] * batch, return_tensors="pt", add_special_tokens=False)["input_ids"]


def _single(name: str, token: str = "") -> Any:
    """A call for a processor that takes one image per prompt: ``images`` flat, the text as is. ``token``: the
    config attribute the model's forward finds the image tokens by (BLIP-2's ``image_token_index``)."""

    def call(proc: Any, config: Any, images: list[Any], text_len: int) -> Any:
        _one_image(name, images)
        if token and getattr(config, token, None) is None and any(images):
            from estimator.errors import UnsupportedError

            raise UnsupportedError(f"{name}'s config has no {token}: its forward cannot find the image tokens the processor "
                                   f"writes (the real model fails the same way)")
        flat = [sample[0] for sample in images if sample] or None
        return proc(images=flat, text=[" a" * text_len] * len(images), return_tensors="pt")

    return call


_CLIP_FRAMES = 4  # InstructBlipVideoProcessor writes num_query_tokens * 4 video tokens: "InstructBLIP works with 4 frames only"


def _video_call(proc: Any, config: Any, images: list[Any], text_len: int) -> Any:
    """InstructBLIP-Video reads a clip of 4 frames per prompt: its processor (transformers' own
    ``InstructBlipVideoProcessor``, its ``InstructBlipVideoVideoProcessor`` at the tower's image size) writes
    ``num_query_tokens`` x 4 ``<video>`` tokens before the text and returns ``pixel_values`` (B, 4, 3, H, W); each
    prompt's image is the clip's first frame, the other three random frames of its size. The stand-in tokenizers
    are those of InstructBLIP's processor, which ``proc`` is."""
    import numpy as np
    from transformers import InstructBlipVideoProcessor, InstructBlipVideoVideoProcessor

    if any(len(sample) != 1 for sample in images):
        from estimator.errors import UnsupportedError

        raise UnsupportedError(f"InstructBLIP-Video reads one clip of {_CLIP_FRAMES} frames per prompt: give it 1 image "
                               "(its first frame)")
    size = _side(getattr(_vision(config), "image_size", None))
    video = InstructBlipVideoProcessor(video_processor=InstructBlipVideoVideoProcessor(size={"height": size, "width": size}),
                                       tokenizer=proc.tokenizer, qformer_tokenizer=proc.qformer_tokenizer,
                                       num_query_tokens=int(config.num_query_tokens))
    rng = np.random.default_rng(1)
    clips = [np.stack([sample[0], *(rng.integers(0, 256, sample[0].shape, dtype=np.uint8) for _ in range(_CLIP_FRAMES - 1))])
             for sample in images]
    return video(images=clips, text=[" a" * text_len] * len(images), return_tensors="pt")


def _captioner(name: str) -> Any:
    """A call for an encoder-decoder captioner: the images through the processor, the text as the decoder's labels."""

    def call(proc: Any, config: Any, images: list[Any], text_len: int) -> Any:
        _one_image(name, images)
        flat = [sample[0] for sample in images if sample]
        if not flat:
            from estimator.errors import UnsupportedError

            raise UnsupportedError(f"{name} captions an image: a prompt without one is not simulated")
        out = dict(proc(images=flat, return_tensors="pt"))
        out.pop("input_ids", None)
        out.pop("decoder_input_ids", None)
        out.pop("decoder_attention_mask", None)
        out["labels"] = _labels(proc, len(flat), text_len)
        return out

    return call


def _formula_call(proc: Any, config: Any, images: list[Any], text_len: int) -> Any:
    """PP-FormulaNet's decoder reads ``input_ids`` shifted right (its forward shifts ``input_ids``, not ``labels``):
    a training batch gives the formula as ``decoder_input_ids`` (start token + the formula but its last token) and
    ``labels``."""
    import torch

    out = _captioner("PP-FormulaNet")(proc, config, images, text_len)
    labels = out["labels"]
    start = getattr(config.text_config, "decoder_start_token_id", None) or 0
    out["decoder_input_ids"] = torch.cat([torch.full_like(labels[:, :1], int(start)), labels[:, :-1]], dim=1)
    return out


def _florence_image(config: Any) -> dict[str, Any]:
    """CLIP's image processor at Florence-2's 768 px, with the tokens one image becomes: DaViT's last stage
    (``image_size`` / the product of the patch strides, squared) plus the projector's temporal token."""
    size = 768
    stride = 1
    for s in getattr(config.vision_config, "patch_stride", [4, 2, 2, 2]):
        stride *= int(s)
    return {"size": {"height": size, "width": size}, "do_center_crop": False, "image_seq_length": (size // stride) ** 2 + 1}


def _florence_call(proc: Any, config: Any, images: list[Any], text_len: int) -> Any:
    _one_image("Florence-2", images)
    flat = [sample[0] for sample in images if sample] or None
    out = dict(proc(images=flat, text=[" a" * text_len] * len(images), return_tensors="pt"))
    out["labels"] = _labels(proc, len(images), text_len)
    return out


def _idefics_call(proc: Any, config: Any, images: list[Any], text_len: int) -> Any:
    """Idefics' prompts are lists: the images in order, then the text."""
    from PIL import Image

    prompts = [[*(Image.fromarray(image) for image in sample), " a" * text_len] for sample in images]
    if proc.tokenizer.pad_token is None:  # the processor pads the batch; the prompts are alike: nothing is added
        proc.tokenizer.pad_token = "[UNK]"
    return proc(text=prompts, return_tensors="pt")


def _kosmos2_5_image(config: Any) -> dict[str, Any]:
    return {"patch_size": {"height": 16, "width": 16}, "max_patches": 4096}


def _step_image(config: Any) -> dict[str, Any]:
    vision = config.vision_config
    size = _side(getattr(vision, "image_size", None), 728)
    return {"size": {"height": size, "width": size}, "patch_size": size * 504 // 728 // 14 * 14 or size,
            "vision_patch_size": int(vision.patch_size)}


def _pix2struct_image(config: Any) -> dict[str, Any]:
    vision = config.vision_config
    side = int(round((int(vision.patch_embed_hidden_size) // 3) ** 0.5))
    return {"patch_size": {"height": side, "width": side}, "max_patches": int(vision.seq_len), "is_vqa": False}


def _chart_call(proc: Any, config: Any, images: list[Any], text_len: int) -> Any:
    """PP-Chart2Table's processor expands nothing: the chat template writes ``<img>``, one ``<imgpad>`` per
    token the tower makes (GOT-OCR2's: the patch grid after the projector's two stride-2 convolutions, 1024 px
    of 16 px patches -> 256, the config's ``image_seq_length``) and ``</img>``, then the text."""
    _one_image("PP-Chart2Table", images)
    side = int(config.vision_config.image_size) // int(config.vision_config.patch_size)
    for _ in range(2):
        side = -(-side // 2)
    page = "<img>" + "<imgpad>" * (side * side) + "</img>"
    flat = [sample[0] for sample in images if sample] or None
    prompts = [page * len(sample) + " a" * text_len for sample in images]
    return proc(images=flat, text=prompts, return_tensors="pt")


def _vbert_processor(config: Any) -> dict[str, Any]:
    """ModernVBERT/UltraVBERT (Idefics3's processor): tokens per tile = patches / pixel_shuffle_factor²."""
    vision = config.vision_config
    return {"image_seq_len": int((vision.image_size // vision.patch_size) ** 2 // config.pixel_shuffle_factor**2)}


def _vbert_image(config: Any) -> dict[str, Any]:
    size = int(config.vision_config.image_size)
    return {"size": {"longest_edge": 4 * size}, "max_image_size": {"longest_edge": size}}


def _vbert(**classes: str) -> Family:

    tags = ["<global-img>", *(f"<row_{i + 1}_col_{j + 1}>" for i in range(6) for j in range(6))]
    return Family(tokens={"<image>": _IMAGE_IDS, "<fake_token_around_image>": (), "<end_of_utterance>": ()},
                  placeholder="<image>", attributes={"image_token": "<image>"}, image_processor=_vbert_image,
                  processor=_vbert_processor, extra_tokens=lambda: tags, known_pixels=True, classes=classes)


def _phi4_image(config: Any) -> dict[str, Any]:
    vision = config.vision_config
    crop = int(getattr(vision, "crop_size", None) or vision.image_size)
    return {"size": {"height": crop, "width": crop}, "patch_size": int(vision.patch_size)}


def _phi4_processor(config: Any) -> dict[str, Any]:
    """Phi-4-multimodal's processor also holds its audio feature extractor (transformers' defaults)."""
    from transformers import Phi4MultimodalFeatureExtractor

    return {"audio_processor": Phi4MultimodalFeatureExtractor()}


def _udop_call(proc: Any, config: Any, images: list[Any], text_len: int) -> Any:
    """UDOP reads a page: its image and the words on it with their boxes (``apply_ocr=False``: the words given, as
    a user with an OCR'd page sends them). Its processor's tokenizer takes words and boxes, so the stand-in is
    transformers' own Unigram ``UdopTokenizer`` over a vocabulary of the config's special ids and one word; the
    text is the decoder's too (``labels``)."""
    import torch
    from transformers import UdopProcessor, UdopTokenizer

    _one_image("UDOP", images)
    flat = [sample[0] for sample in images if sample]
    if not flat:
        from estimator.errors import UnsupportedError

        raise UnsupportedError("UDOP reads a page: a prompt without its image is not simulated")
    pad, eos = int(getattr(config, "pad_token_id", 0) or 0), int(getattr(config, "eos_token_id", 1) or 1)
    pieces = {pad: "<pad>", eos: "</s>"}
    vocab = [(pieces.get(i, f"<unused_{i}>"), 0.0) for i in range(max(pieces) + 1)] + [("<unk>", 0.0), ("▁a", -1.0)]
    udop = UdopProcessor(image_processor=proc.image_processor, tokenizer=UdopTokenizer(vocab=vocab))
    words = [["a"] * text_len for _ in flat]
    side = 1000 // max(text_len, 1)  # the words on one line across the page, boxes in [0, 1000]
    boxes = [[[i * side, 0, (i + 1) * side, 20] for i in range(text_len)] for _ in flat]
    out = dict(udop(images=flat, text=words, boxes=boxes, return_tensors="pt"))
    out["labels"] = torch.as_tensor(out["input_ids"])[:, :text_len].clone()
    return out


def captioner_families() -> dict[str, Family]:
    """model_type -> its processor family."""

    # the processor adds "<image>" as its own AddedToken (a tokenizer attribute would be a plain string)
    blip2 = Family(tokens={"<image>": _IMAGE_IDS}, placeholder="",
                   image_processor=_square, processor=lambda config: {"num_query_tokens": config.num_query_tokens},
                   call=_single("BLIP-2", "image_token_index"))
    instructblip = Family(tokens={"<image>": _IMAGE_IDS}, placeholder="",
                          image_processor=_square, call=_single("InstructBLIP", "image_token_index"),
                          processor=lambda config: {"num_query_tokens": config.num_query_tokens,
                                                    "qformer_tokenizer": _stand_in(config.qformer_config)})
    # InstructBLIP's processor (image processor and both stand-in tokenizers), then its video processor in the call
    video = Family(tokens={"<video>": ("video_token_index",)}, placeholder="", attributes={"image_token": "<video>"},
                   image_processor=_square, call=_video_call,
                   classes={"processor": "InstructBlipProcessor", "image_processor": "BlipImageProcessor"},
                   processor=lambda config: {"num_query_tokens": config.num_query_tokens,
                                             "qformer_tokenizer": _stand_in(config.qformer_config)})
    return {
        "blip-2": blip2,
        "instructblipvideo": video,
        "instructblip": instructblip,
        "blip": Family(tokens={}, placeholder="", image_processor=_square, call=_single("BLIP")),
        "git": Family(tokens={}, placeholder="", image_processor=_clip, call=_single("GIT")),
        "tipsv2": Family(tokens={}, placeholder="", image_processor=_square, call=_single("TIPS v2")),
        "florence2": Family(tokens={"<image>": _IMAGE_IDS, "<s>": ("text_config.bos_token_id",), "</s>": ("text_config.eos_token_id",)},
                            placeholder="", attributes={"image_token": "<image>", "bos_token": "<s>", "eos_token": "</s>"},
                            image_processor=_florence_image, call=_florence_call, decoder_text=True),
        "kosmos-2": Family(classes={"processor": "Kosmos2Processor"}, tokens={"<s>": ("text_config.bos_token_id",), "</s>": ("text_config.eos_token_id",)}, placeholder="",
                           attributes={"bos_token": "<s>"}, image_processor=_clip, call=_single("Kosmos-2"),
                           processor=lambda config: {"num_patch_index_tokens": 1024}),
        "kosmos-2.5": Family(classes={"processor": "Kosmos2_5Processor"}, tokens={"<s>": ("text_config.bos_token_id",), "<image>": (), "</image>": ()}, placeholder="",
                             attributes={"bos_token": "<s>", "boi_token": "<image>", "eoi_token": "</image>", "image_token": "<s>"},
                             image_processor=_kosmos2_5_image, call=_single("Kosmos-2.5"),
                             processor=lambda config: {"num_image_tokens": int(config.latent_query_num)}),
        "idefics": Family(tokens={"<image>": _IMAGE_IDS, "<fake_token_around_image>": (), "<end_of_utterance>": (),
                                  "<s>": ("bos_token_id",)},
                          placeholder="<image>", attributes={"image_token": "<image>", "bos_token": "<s>"},
                          image_processor=lambda config: {"image_size": _side(config.vision_config.image_size)},
                          processor=lambda config: {"image_size": _side(config.vision_config.image_size)}, call=_idefics_call),
        "step3p7": Family(tokens={"<im_patch>": _IMAGE_IDS, "<patch_start>": (), "<patch_end>": (), "<patch_newline>": (),
                                  "<im_start>": (), "<im_end>": ()},
                          placeholder="<im_patch>", attributes={"image_token": "<im_patch>"}, image_processor=_step_image),
        "pp_chart2table": Family(tokens={"<imgpad>": _IMAGE_IDS, "<img>": (), "</img>": ()}, placeholder="",
                                 attributes={}, image_processor=_square, call=_chart_call),
        "modernvbert": _vbert(image_processor="Idefics3ImageProcessor"),
        "ultravbert": _vbert(),
        "phi4_multimodal": Family(tokens={"<|image|>": ("vision_config.image_token_id",),
                                          "<|audio|>": ("audio_config.audio_token_id",)},
                                  placeholder="<|image|>", attributes={"image_token": "<|image|>", "audio_token": "<|audio|>"},
                                  image_processor=_phi4_image, processor=_phi4_processor,
                                  known_pixels=True),  # the crops' masks are asked which patches are real
        "udop": Family(tokens={}, placeholder="", call=_udop_call, decoder_text=True,
                       image_processor=lambda config: {"apply_ocr": False, "size": {"height": int(config.image_size),
                                                                                     "width": int(config.image_size)}},
                       default_size=lambda config: int(config.image_size)),
        "pix2struct": Family(tokens={}, placeholder="", image_processor=_pix2struct_image, call=_captioner("Pix2Struct"),
                             decoder_text=True),
        "pp_formulanet": Family(tokens={}, placeholder="", image_processor=_square, call=_formula_call,
                                decoder_text=True),
        "vision-encoder-decoder": Family(tokens={}, placeholder="", image_processor=_square, decoder_text=True,
                                         call=_captioner("the vision-encoder-decoder model"),
                                         classes={"processor": "TrOCRProcessor", "image_processor": "ViTImageProcessor"}),
    }
