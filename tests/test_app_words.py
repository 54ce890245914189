"""What the page says beside a result: notes once each, the method of the mode that ran, the columns
that apply, the "fits on" table for any columns the core gives, warnings, and errors in the page's words."""

from __future__ import annotations

from urllib.parse import parse_qsl

import pandas as pd
import pytest

from estimator.errors import GatedModelError, ModelNotFoundError, Option
from estimator.options import DType, InputShape, Mode, WorkSpec
from estimator.peak.rows import position_note
from estimator.result import Estimate, Row
from estimator_app import form, tables
from estimator_app.fields import FIELDS
from estimator_app.wording import page_message

GiB = 1024**3


def estimate(mode: str = "load", **row: object) -> Estimate:
    rows = tuple(
        Row(**{"dtype": dtype, "total_bytes": GiB, "largest_layer_bytes": GiB // 4, "training_adam_bytes": 4 * GiB, "method": "exact",
               "notes": ("largest layer: wte", "mismatch: checkpoint has more"), **row})  # type: ignore[arg-type]
        for dtype in ("float32", "float16", "int8", "int4")
    )
    return Estimate(model="m", library="transformers", source="hub", mode=mode, rows=rows)


def test_a_note_shared_by_every_row_is_said_once() -> None:
    note = tables.method_note(estimate())
    assert note.count("mismatch: checkpoint has more") == 1 and "- all rows: mismatch" in note


def test_a_row_with_no_figure_is_not_labelled_exact() -> None:
    row = Row(dtype="int4", total_bytes=None, largest_layer_bytes=None, training_adam_bytes=None, method="exact", notes=("no timm int4",))
    result = Estimate(model="timm/x", library="timm", source="hub", mode="load", rows=(row,))
    assert tables.results_frame(result)["method"].tolist() == ["not available"]
    assert "*exact*" not in tables.method_note(result) and "*not available* (int4)" in tables.method_note(result)


@pytest.mark.parametrize(("mode", "says", "never"), [("inference", "forward pass", "backward"), ("training", "backward and optimizer", "prefill")])
def test_the_method_text_is_the_mode_s(mode: str, says: str, never: str) -> None:
    note = tables.method_note(estimate(mode, method="simulated", peak_bytes=2 * GiB, components={"weights": 2 * GiB}))
    assert says in note and never not in note


def test_the_training_column_is_left_out_of_inference() -> None:
    assert tables.TRAINING_LABEL not in tables.results_frame(estimate("inference", peak_bytes=GiB)).columns
    assert tables.TRAINING_LABEL in tables.results_frame(estimate("load")).columns


def test_fits_on_is_rendered_from_whatever_columns_the_core_gives() -> None:
    # a column the core may add later (issue 15: largest batch) flows through; the verdicts come right after the name
    frame = pd.DataFrame({"GPU": ["T4", "H200"], "Memory (stated)": ["16 GB", "141 GB"], "float32": ["does not fit (1 GiB short)", "fits (9 GiB free)"],
                          "float16": ["fits (3 GiB free)", "fits (20 GiB free)"], "Largest batch": ["2", "64"]})
    html = tables.fits_html(estimate(), frame, "caption")
    headers = [h.split(">")[1].split("<")[0] for h in html.split("<th scope=\"col\"")[1:]]
    assert headers == ["GPU", "float32", "float16", "Memory (stated)", "Largest batch"]
    assert html.count('class="mme-verdict mme-no"') == 1 and html.count('class="mme-verdict mme-yes"') == 3
    assert 'data-label="Largest batch">64<' in html
    assert "no GPU is listed" in tables.fits_html(estimate(), frame, "caption", device="cpu")


def test_the_core_s_warnings_are_shown_beside_the_result() -> None:
    warned = estimate("inference", method="simulated", peak_bytes=GiB, notes=("warning: sequence length 2,000 is longer than ...",))
    html = tables.summary_html(warned)
    assert "Check this:" in html and html.count("sequence length 2,000") == 1
    assert "Check this" not in tables.summary_html(estimate())


def test_a_sequence_longer_than_the_position_table_is_warned() -> None:
    work = WorkSpec(mode=Mode.INFERENCE, shape=InputShape(seq_len=1000, max_new_tokens=100))
    note = position_note({"n_positions": 1024}, work)
    assert note is not None and note.startswith("warning: ") and "1,024 positions (n_positions)" in note and "+ 100 new tokens" in note
    assert position_note({"n_positions": 1024}, WorkSpec(mode=Mode.INFERENCE, shape=InputShape(seq_len=1000, max_new_tokens=24))) is None
    assert position_note({"text_config": {"max_position_embeddings": 512}}, WorkSpec(mode=Mode.TRAINING, shape=InputShape(seq_len=513))) is not None
    assert position_note({}, work) is None


def test_gated_and_missing_repos_name_the_page_s_token_field() -> None:
    gated = GatedModelError(["m/x is gated: accept ... and pass a token (", Option("token"), ", the HF_TOKEN variable, or `hf auth login`)."],
                            model_id="m/x")
    missing = ModelNotFoundError(["No model 'm/y' on the Hub; check the spelling.", " If it is private, pass a token that can read it (",
                                  Option("token"), " or HF_TOKEN)."], model_id="m/y")
    for exc in (gated, missing):
        message, status = page_message(exc)
        assert status == 2 and "“Hub token” under Advanced" in message
        assert "HF_TOKEN" not in message and "hf auth" not in message and "--" not in message


def test_dtypes_come_in_the_checkboxes_order_everywhere() -> None:
    ticked = form.from_form("gpt2", "main", "auto", ["int4", "bfloat16", "float32"], "load", 1, 0, 0, 0, "cuda", "adamw", False, False, 0, "", "none", "", 0, "f16", "auto", "", 0.9, 0, 0, 0, "auto", 16, 1, 1, "none", "none", 1, 1, "none", "0.19", 0, 0, 0, "auto")
    assert ticked.dtypes == ("float32", "bfloat16", "int4")
    assert ticked.estimate_kwargs()["dtypes"] == ["float32", "bfloat16", "int4"]
    linked = form.from_query({"model": "gpt2", "dtypes": "int4,bfloat16,float32"}).state
    assert linked.dtypes == ticked.dtypes and "dtypes=float32,bfloat16,int4" in form.to_query(linked)


def test_every_field_has_one_spec_in_order() -> None:
    # adding a field is one entry in fields.FIELDS and one in form.SPECS (and its widget): both lists agree
    assert tuple(form.SPECS) == FIELDS == form.PARAMS
    state = form.FormState(model="gpt2", seq=128, lora=8, lora_targets=("q",), gpu="T4", pure16=True)
    assert form.from_form(*form.to_fields(state)) == state
    assert form.from_query(parse_qsl(form.to_query(state), keep_blank_values=True)).state == state


def test_an_moe_int4_row_says_its_fused_experts_stay_16_bit() -> None:
    """Mixtral's int4 row is barely smaller than bf16: transformers fuses the experts into 3-D tensors, which
    bitsandbytes does not quantize. Counted independently from the config: layers x experts x 3 matrices."""
    import torch
    from transformers import MixtralConfig, MixtralForCausalLM

    from estimator.quant.bnb import BnbScheme, bnb_notes, quantized_bytes

    config = MixtralConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                           num_local_experts=4, num_experts_per_tok=2, vocab_size=128)
    with torch.device("meta"):
        model = MixtralForCausalLM(config).to(torch.bfloat16)
    weights = quantized_bytes(model, BnbScheme.INT4, load_dtype=DType.BFLOAT16)
    assert weights.fused_experts_bytes == 2 * 4 * 3 * 64 * 96 * 2
    notes = bnb_notes(BnbScheme.INT4, weights)
    assert any("MoE experts stay" in n and f"{weights.fused_experts_bytes:,} bytes" in n for n in notes)
