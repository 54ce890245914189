"""MiniCPM-V 4.6, MiniCPM-V 4.7 and MiniCPM-o OCR: the processor family (see :class:`estimator.peak.inputs.prompts.family.Family`).

Their processors (``MiniCPMV4_6Processor``, ``MiniCPMV4_7Processor``, ``MiniCPMOcrProcessor``) replace each image
token of the prompt by ``<image_id>N</image_id>`` (the image's number in its prompt), the overview
``<image>`` + image tokens + ``</image>`` and, for an image larger than ``scale_resolution`` squared, its slices:
rows of ``<slice>`` + image tokens + ``</slice>`` joined by ``"\\n"``; each crop's tokens are its patches divided
by 16 (``downsample_mode`` "16x") or 4 ("4x"). The image processor cuts and resizes (``scale_resolution`` 448,
``max_slice_nums`` 9: its defaults) on the vision tower's ``patch_size``. A video (``--video-frames``,
:mod:`estimator.peak.inputs.prompts.video`) is written ``<|video_pad|>``; each frame becomes ``<image>`` + its tokens +
``</image>`` (4.6 and OCR number the video as they number images, 4.7 does not).

The token strings are the MiniCPM-V 4.6 tokenizer's (``<|image_pad|>``, ``<|video_pad|>``, ``<image>``,
``</image>``, ``<slice>``, ``</slice>``, ``<image_id>``, ``</image_id>``, as its users pass them to the
processor's tokenizer); the ids are the config's (MiniCPM-V 4.6's checkpoints state ``image_token_id`` 248056, the
Qwen3.5 tokenizer's ``<|image_pad|>``; MiniCPM-V 4.7's also the markers' ids, which its 3-D rotary positions read).
The stand-in tokenizer writes ``"\\n"`` as one token (the Qwen tokenizer's ``Ċ``; ``newline_id`` in 4.7's config)
and an image number as one text token (the Qwen tokenizer splits digits: images past the tenth of a prompt are one
token short each).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from estimator.peak.inputs.prompts.family import Family

if TYPE_CHECKING:
    from estimator.peak.inputs.prompts.family import Family

__all__ = ["minicpm_families"]

_NEWLINE = "\n"
_TOKENS: dict[str, tuple[str, ...]] = {
    "<|image_pad|>": ("image_token_id",),
    "<|video_pad|>": ("video_token_id",),
    "<image>": ("image_start_id",),
    "</image>": ("image_end_id",),
    "<slice>": ("slice_start_id",),
    "</slice>": ("slice_end_id",),
    "<image_id>": (),
    "</image_id>": (),
    _NEWLINE: ("newline_id",),
}
_ATTRIBUTES = {"image_token": "<|image_pad|>", "video_token": "<|video_pad|>", "image_start_token": "<image>",
               "image_end_token": "</image>", "slice_start_token": "<slice>", "slice_end_token": "</slice>",
               "image_id_start_token": "<image_id>", "image_id_end_token": "</image_id>"}
SCALE_RESOLUTION = 448  # the image processors' default scale_resolution: an image of that size is one crop


def _image(config: Any) -> dict[str, Any]:
    """The image processor's patching as the model reads it: the vision tower's ``patch_size`` and the config's
    ``downsample_mode`` (the processor's token count and the vision tower's merges agree only so). A vision tower
    asked alone has no ``downsample_mode`` of its own: the image processor's default then."""
    patch = config.vision_config.patch_size
    settings = {"patch_size": int(patch[0] if isinstance(patch, (list, tuple)) else patch)}
    mode = getattr(config, "downsample_mode", None)
    return settings if mode is None else {**settings, "downsample_mode": str(mode)}


def _family() -> Family:

    return Family(tokens=dict(_TOKENS), placeholder="<|image_pad|>", attributes=dict(_ATTRIBUTES), image_processor=_image,
                  default_size=lambda config: SCALE_RESOLUTION)


def minicpm_families() -> dict[str, Family]:
    """model_type -> its processor family."""
    family = _family()
    return {"minicpmv4_6": family, "minicpmv4_7": family, "minicpm_ocr": family}
