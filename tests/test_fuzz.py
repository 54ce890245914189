"""Property-based and fuzz tests: every input ends in an answer or a documented refusal.

Inputs (``testkit/fuzz_strategies.py``): model references, every option of ``estimate`` and of the
CLI, share-link query strings, config.json texts (through a local folder, by the API and the CLI)
and safetensors headers served by the Hub stand-in. An outcome is acceptable when it is an answer
or an ``EstimatorError`` (CLI: exit 0, 2 or 3; app: ``gr.Error``); a traceback, a CLI exit 1, a hang
or a worker over its memory budget fails. The Hub and CLI cases run in one worker process
(``testkit/fuzz_worker.py``) under an address-space limit, each case bounded in wall time; the pure
ones run here under hypothesis deadlines. This is the short, deterministic version (derandomized);
``bench/fuzz.py`` runs the same targets for longer.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from estimator.errors import EstimatorError
from estimator.options import parse_options
from estimator.source.reference import parse_reference
from estimator_app.form import from_query, share_link
from testkit import fuzz_strategies as fs
from testkit.fuzz_worker import FuzzWorker

FAST = settings(max_examples=150, deadline=2000, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
SLOW = settings(
    max_examples=12, deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
RSS_BUDGET_KIB = 6 * 1024 * 1024  # a worker that grows past 6 GiB resident has a memory problem


@pytest.fixture(scope="module")
def worker() -> Iterator[FuzzWorker]:
    w = FuzzWorker(case_seconds=30, memory_bytes=24 << 30)
    yield w
    w.close()


def _accepted(result: dict[str, Any]) -> None:
    assert result["outcome"] in ("answer", "refusal"), result["detail"]
    assert result["maxrss_kib"] <= RSS_BUDGET_KIB, result



@FAST
@given(fs.references())
def test_any_reference_parses_or_is_refused(text: str) -> None:
    with contextlib.suppress(EstimatorError):
        parse_reference(text)


def test_an_overlong_reference_is_refused() -> None:
    with pytest.raises(EstimatorError):
        parse_reference("a" * 300)



@FAST
@given(fs.option_kwargs())
def test_any_options_parse_or_are_refused(kwargs: dict[str, Any]) -> None:
    kwargs = {k: v for k, v in kwargs.items() if k not in ("cross_check", "revision")}
    with contextlib.suppress(EstimatorError):
        parse_options(**kwargs)


@pytest.mark.parametrize("dtypes", [1.5, False])
def test_a_scalar_dtypes_is_refused(dtypes: object) -> None:
    with pytest.raises(EstimatorError):
        parse_options(dtypes=dtypes)


@FAST
@given(fs.queries())
def test_any_share_link_query_parses_and_round_trips(params: list[tuple[str, str]]) -> None:
    parsed = from_query(params)  # never raises: each bad parameter is a notice
    link = share_link("http://127.0.0.1:7860/", parsed.state)
    again = from_query(parse_qsl(urlsplit(link).query, keep_blank_values=True))
    assert again.state == parsed.state


@SLOW
@given(fs.references(), fs.option_kwargs())
def test_estimate_answers_or_refuses_any_reference_and_options(worker: FuzzWorker, model: str, kwargs: dict[str, Any]) -> None:
    kwargs.setdefault("timeout", 5.0)
    _accepted(worker.run({"target": "api", "model": model, "kwargs": kwargs}))


@SLOW
@given(fs.option_kwargs())
def test_estimate_on_a_served_model_with_any_options(worker: FuzzWorker, kwargs: dict[str, Any]) -> None:
    _accepted(worker.run({"target": "api", "model": fs.TINY, "kwargs": kwargs}))


@SLOW
@given(fs.cli_argv())
def test_the_cli_exits_0_2_or_3_for_any_flags(worker: FuzzWorker, argv: list[str]) -> None:
    _accepted(worker.run({"target": "cli", "argv": argv}))


@SLOW
@given(fs.config_texts(max_depth=400), st.booleans())
def test_any_config_json_in_a_folder(worker: FuzzWorker, text: str, via_cli: bool) -> None:
    if via_cli:
        case = {"target": "config", "via": "cli", "config": text, "argv": ["{dir}", "--format", "json"]}
    else:
        case = {"target": "config", "via": "api", "config": text, "kwargs": {}}
    _accepted(worker.run(case))


@SLOW
@given(fs.safetensors_prefixes(), st.sampled_from(["load", "inference"]))
def test_any_safetensors_header_served_by_the_stand_in(worker: FuzzWorker, file: dict[str, Any], mode: str) -> None:
    _accepted(worker.run({"target": "header", **file, "kwargs": {"mode": mode, "device": "cpu", "timeout": 5.0}}))


def test_a_deeply_nested_config_is_refused(worker: FuzzWorker) -> None:
    _accepted(worker.run({"target": "config", "via": "api", "config": '{"a":' * 3000 + "1" + "}" * 3000, "kwargs": {}}))


@pytest.mark.parametrize("entry", [{"dtype": "F32", "shape": [], "data_offsets": None}, {"dtype": "F32", "shape": None, "data_offsets": [0, 0]}])
def test_a_header_with_a_malformed_entry_is_refused(worker: FuzzWorker, entry: dict[str, Any]) -> None:
    import base64
    import json
    import struct

    raw = json.dumps({"model.embed_tokens.weight": entry}).encode()
    prefix = struct.pack("<Q", len(raw)) + raw
    case = {"target": "header", "prefix_b64": base64.b64encode(prefix).decode(), "size": len(prefix)}
    _accepted(worker.run({**case, "kwargs": {"timeout": 5.0}}))


def test_a_hang_and_a_crash_are_caught_not_waited_for() -> None:
    """The harness itself: a case past its time is reported, and the next case gets a fresh worker."""
    w = FuzzWorker(case_seconds=1)
    try:
        slow = w.run({"target": "api", "model": "estimator-test/slow", "kwargs": {"timeout": 30.0}})
        assert slow["outcome"] == "crash" and "timeout" in slow["detail"]
        assert w.run({"target": "api", "model": "", "kwargs": {}})["outcome"] == "refusal"
    finally:
        w.close()


@pytest.mark.parametrize("argv", [["{dir}", "--format", "json"], ["{dir}", "--dtypes", "int8"]])
def test_a_config_with_wrong_types_for_architectures_and_dtype_is_answered_or_refused(worker: FuzzWorker, argv: list[str]) -> None:
    """Found by bench/fuzz.py: a non-list ``architectures`` and a list as ``torch_dtype`` ended in internal errors."""
    config = {"model_type": "llama", "architectures": 10**30, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 1000, "max_position_embeddings": 128, "torch_dtype": []}
    import json

    _accepted(worker.run({"target": "config", "via": "cli", "config": json.dumps(config), "argv": argv}))
