"""The benchmark's report (no GPU): the other-card estimate and the markdown, from a real run's bench.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.bench import CARDS, estimate_cards
from engine.bench.report import _card_lines, markdown as _markdown

RUN = Path(__file__).resolve().parents[1] / "bench" / "results" / "run-22-long-conversation" / "bench.json"
SAMPLED = "sampled (top_k=4, temperature 1.0)"


@pytest.fixture(scope="module")
def results() -> dict:
    return json.loads(RUN.read_text())


def test_the_estimate_reproduces_the_h200_it_was_fitted_on(results: dict) -> None:
    estimate = estimate_cards(results, SAMPLED)
    assert "ESTIMATE" in estimate["label"]
    measured = results["summary"][SAMPLED]["engine"]
    share = results["copy_bandwidth_gbs"] / 4800.0
    for stage, data in estimate["stages"].items():
        assert data["kernels"] > 0 and data["bytes"] == results["stage_bytes"][stage]
        # At the H200's own bandwidth the model gives back the stage time it was fitted on.
        at_h200 = data["bytes"] / (results["copy_bandwidth_gbs"] * 1e9) * 1e3 + data["kernels"] * data["per_kernel_us"] / 1e3
        assert at_h200 == pytest.approx(measured[f"{stage}_ms"], rel=1e-9)
    cards = estimate["cards"]
    assert list(cards) == list(CARDS)
    for card, data in cards.items():
        assert data["assumed_bandwidth_gbs"] == pytest.approx(CARDS[card][0] * share)
        # Never faster than the H200 run, nor than the card's own bandwidth floor.
        assert data["ms_per_frame"] > measured["ms_per_frame"] and data["rtf"] > data["rtf_bandwidth_floor"]
        assert data["ttfa_ms"] > measured["ttfa_turn1_ms"]
    by_bandwidth = sorted(cards.values(), key=lambda d: d["published_bandwidth_gbs"])
    assert [d["rtf"] for d in by_bandwidth] == sorted((d["rtf"] for d in by_bandwidth), reverse=True)


def test_the_stored_estimate_is_what_the_code_computes(results: dict) -> None:
    assert estimate_cards(results, SAMPLED) == results["card_estimates"]


def test_the_markdown_has_every_long_conversation_turn_and_the_estimate(results: dict) -> None:
    text = _markdown(results)
    long = results["long_conversation"]
    assert len(long["turns"]) >= 40 and long["context_tokens"] == 4096
    assert max(t["take_s"] for t in long["turns"]) == 60.0 and long["turns_trimmed"] > 0
    rows = [line for line in text.splitlines() if line.startswith("| ") and line.split("|")[1].strip().isdigit()]
    assert len(rows) == len(long["turns"])
    assert f"peak reserved {long['peak_reserved_gb']:.2f} GB" in text
    assert "ESTIMATE" in text and all(card in text for card in CARDS)
    assert "## Engine start-up" in text


def test_a_call_cut_short_keeps_what_it_measured_and_says_so(tmp_path: Path) -> None:
    """After each mode the bench writes bench.json and bench.md from the modes measured so far (run 32's
    engine-and-recipe run, cut back to the engine alone with two modes still to come)."""
    from engine.bench.report import write_results as _write_results

    results = json.loads((RUN.parents[1] / "run-32-staged-attention" / "bench.json").read_text())
    for runs in results["modes"].values():
        del runs["recipe"]
    results["summary"] = {}
    results["modes_not_run_yet"] = ["recipe", "eager"]
    _write_results(results, tmp_path)
    written = json.loads((tmp_path / "bench.json").read_text())
    assert {label: list(modes) for label, modes in written["summary"].items()} == {SAMPLED: ["engine"], "greedy": ["engine"]}
    assert written["summary"][SAMPLED]["engine"]["ms_per_frame"] == pytest.approx(3.525, abs=1e-3)
    text = (tmp_path / "bench.md").read_text()
    assert "**Partial results**: written before these modes ran: recipe, eager." in text
    rows = [line.split("|")[1].strip() for line in text.splitlines() if line.startswith("| ")]
    assert "engine" in rows and "recipe" not in rows and "eager" not in rows
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench.json", "bench.md"]  # no .part left over


@pytest.fixture
def bench_without_gpu(monkeypatch: pytest.MonkeyPatch):
    """engine.bench.run with its GPU parts replaced by run 32's measured data: the recipe mode gives its
    numbers, the eager mode dies inside (as a device call past its time limit does)."""
    import engine.bench.random_model as random_model
    import engine.bench.run as bench
    import engine.model.loading as loading
    import engine.realtime.kernels as kernels
    import engine.tools.reply as reply
    from engine.bench.workload import Workload

    measured = json.loads((RUN.parents[1] / "run-32-staged-attention" / "bench.json").read_text())

    def recipe(loaded, workload, sampling):
        return measured["modes"]["greedy" if sampling.greedy else SAMPLED]["recipe"]

    def eager(loaded, workload, sampling):
        raise Killed

    monkeypatch.setattr(reply, "quiet_library_logs", lambda: None)  # process-wide settings: not in a test
    monkeypatch.setattr(bench.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(loading, "use_expandable_cuda_segments", lambda: True)
    monkeypatch.setattr(kernels, "compile_in_background", lambda device: None)
    monkeypatch.setattr(random_model, "random_full_size_model", lambda: object())
    monkeypatch.setattr(bench, "make_workload", lambda loaded: Workload([1, 2], [], 6, 9))
    monkeypatch.setattr(bench, "copy_bandwidth_gbs", lambda: measured["copy_bandwidth_gbs"])
    monkeypatch.setattr(bench, "stage_bytes", lambda loaded: measured["stage_bytes"])
    monkeypatch.setattr(bench, "environment", lambda: measured["environment"])
    monkeypatch.setattr(bench, "run_recipe", recipe)
    monkeypatch.setattr(bench, "run_eager", eager)
    matmul = bench.torch.backends.cuda.matmul
    allow_tf32 = matmul.allow_tf32  # run_bench sets it for the process
    yield bench, measured
    matmul.allow_tf32 = allow_tf32


class Killed(BaseException):
    pass


def test_a_run_killed_in_a_later_mode_leaves_the_earlier_modes_on_disk(tmp_path: Path, bench_without_gpu) -> None:
    """run_bench's own loop: the process dies inside the eager mode, and bench.json already holds both
    samplings of the recipe mode and says that eager was still to come."""
    import argparse

    bench, measured = bench_without_gpu
    with pytest.raises(Killed):
        bench.run_bench(argparse.Namespace(modes="recipe,eager", model=None, out=str(tmp_path), long_turns=0))
    written = json.loads((tmp_path / "bench.json").read_text())
    assert written["modes_not_run_yet"] == ["eager"]
    assert {label: list(modes) for label, modes in written["summary"].items()} == {SAMPLED: ["recipe"], "greedy": ["recipe"]}
    assert written["summary"]["greedy"]["recipe"] == measured["summary"]["greedy"]["recipe"]
    assert "**Partial results**: written before these modes ran: eager." in (tmp_path / "bench.md").read_text()


def test_sections_hooked_into_the_main_flow_land_in_bench_json(
    tmp_path: Path, bench_without_gpu, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SECTIONS (where engine/bench/small_cards.py hooks in) run after the modes, each under its own key;
    one that fails records its error and loses nothing else."""
    import argparse

    bench, measured = bench_without_gpu
    seen = []

    def works(args: argparse.Namespace) -> dict:
        seen.append(args.out)
        return {"caps_gb": [4.9, 6.9]}

    def fails(args: argparse.Namespace) -> dict:
        raise RuntimeError("out of memory")

    monkeypatch.setattr(bench, "SECTIONS", {"small_cards": works, "broken": fails})
    assert bench.run_bench(argparse.Namespace(modes="recipe", model=None, out=str(tmp_path), long_turns=0)) == 0
    written = json.loads((tmp_path / "bench.json").read_text())
    assert seen == [str(tmp_path)]
    assert written["small_cards"] == {"caps_gb": [4.9, 6.9]}
    assert written["broken"] == {"error": "RuntimeError: out of memory"}
    assert written["summary"]["greedy"]["recipe"] == measured["summary"]["greedy"]["recipe"]


def test_int8_run_reports_bytes_agreement_and_each_cards_speed_and_memory() -> None:
    """Run 56's bench.json (engine and engine-int8 side by side) with run 57's small_cards: the report has int8's
    bytes, its agreement with bf16 per stream, and for bf16 and int8 each card's estimate beside its measured memory."""
    from engine.bench.run import _attach_card_memory

    root = Path(__file__).resolve().parents[1] / "bench" / "results"
    results = json.loads((root / "run-56-int8-final" / "bench" / "bench.json").read_text())
    results["small_cards"] = json.loads((root / "run-57-steady-state" / "small" / "small_cards.json").read_text())
    _attach_card_memory(results)
    int8 = results["int8"]
    assert int8["bytes_per_audio_frame"] < 1.75e9 < 3.2e9 < results["stage_bytes"]["backbone_step"] + results["stage_bytes"]["depthformer_frame"]
    assert set(int8["agreement_with_bf16"]["streams"]) == {"text", *(f"codebook_{i}" for i in range(8))}
    bf16_memory, int8_memory = results["card_estimates"]["memory_gb"], int8["card_estimates"]["memory_gb"]
    assert bf16_memory.keys() == int8_memory.keys() and all(int8_memory[c]["app_gb"] < bf16_memory[c]["app_gb"] for c in bf16_memory)
    text = _markdown(results)
    assert text.count("| card (memory, small_cards) |") == 2 and "| codebook_7 | 72 |" in text
    for card, estimate in int8["card_estimates"]["cards"].items():  # int8 reads half the bytes: faster on every card
        assert estimate["rtf"] < results["card_estimates"]["cards"][card]["rtf"]


def test_the_int8_estimate_counts_the_dequantization_as_arithmetic_that_overlaps_the_bytes() -> None:
    """Run 63 (bf16 and int8 side by side): with bf16's per-kernel cost as the reference, each int8 stage still
    gives back its H200 time at the H200's own bandwidth and FP32 throughput; on every card the estimate lies
    between the card's bandwidth floor and the conservative one (all of the H200's excess as per-kernel cost),
    which is exactly the estimate without a reference."""
    from engine.bench.cards import FP32_TFLOPS, H200_FP32_TFLOPS

    results = json.loads((Path(__file__).resolve().parents[1] / "bench" / "results" / "run-63-final-bench" / "bench.json").read_text())
    int8 = results["int8"]
    view = {**results, "stage_bytes": int8["stage_bytes"], "engine_kernels": int8["engine_kernels"],
            "summary": {SAMPLED: {"engine": results["summary"][SAMPLED]["engine-int8"]}}}  # fmt: skip
    bf16_stages = results["card_estimates"]["stages"]
    plain = estimate_cards(view, SAMPLED)
    estimate = estimate_cards(view, SAMPLED, latency_reference=bf16_stages)
    assert estimate["label"].startswith(plain["label"])
    for stage, data in estimate["stages"].items():
        assert data["per_kernel_us"] <= bf16_stages[stage]["per_kernel_us"] + 1e-12
        assert data["per_kernel_us"] <= plain["stages"][stage]["per_kernel_us"] + 1e-12
        floor = data["bytes"] / (results["copy_bandwidth_gbs"] * 1e9) * 1e3
        at_h200 = max(floor, data["arithmetic_h200_ms"] * H200_FP32_TFLOPS / H200_FP32_TFLOPS) + data["kernels"] * data["per_kernel_us"] / 1e3
        assert at_h200 == pytest.approx(data["h200_ms"], rel=1e-9)
    # The backbone's int8 products spend more of the H200's time on arithmetic than their bytes take.
    assert estimate["stages"]["backbone_step"]["arithmetic_h200_ms"] > int8["stage_bytes"]["backbone_step"] / (results["copy_bandwidth_gbs"] * 1e9) * 1e3
    for card, data in estimate["cards"].items():
        assert data["conservative"] == {key: plain["cards"][card][key] for key in ("ms_per_frame", "rtf", "ttfa_ms")}
        assert data["rtf_bandwidth_floor"] < data["rtf"] <= data["conservative"]["rtf"]
    assert estimate["cards"]["RTX 3060 12GB"]["rtf"] < plain["cards"]["RTX 3060 12GB"]["rtf"] - 0.003
    assert CARDS.keys() == FP32_TFLOPS.keys()
    text = "\n".join(_card_lines("t", estimate))
    assert "RTF (all H200 excess as per-kernel cost)" in text and f"| {estimate['cards']['RTX 4060']['conservative']['rtf']:.3f} |" in text
    assert "RTF (all H200 excess" not in "\n".join(_card_lines("t", plain))


def test_voice_switches_and_open_to_ready_are_summed_up_per_precision_kind_and_launch() -> None:
    """Run 95's small_cards launches (before issue 45): the section's summaries give each precision's switches per voice
    kind and each launch's open-to-ready, the verdicts flag the issue's limits (0.25 s a switch, 3 s / 8 s to ready)
    that those numbers missed, and the report shows both tables."""
    import statistics

    from engine.bench.report import small_cards_lines
    from engine.bench.run import _attach_app_startup
    from engine.bench.small_cards import _verdicts, open_to_ready, summarize_switches, voice_switch_summary

    root = Path(__file__).resolve().parents[1] / "bench" / "results" / "run-95-final"
    small = json.loads((root / "small" / "small_cards.json").read_text())
    runs = small["runs"]
    for run in runs:
        run["voice_switches"] = summarize_switches(run["voices"])
    switches = voice_switch_summary(runs)
    assert set(switches) == {"bf16", "int8"} and set(switches["bf16"]) == {"attention_mlp", "all_linear", "none"}
    bf16_all_linear = [s["switch_s"] for r in runs if r["precision"] == "bf16" for s in r["voices"] if s["voice"] == "all_linear"]
    assert len(bf16_all_linear) == 6 and switches["bf16"]["all_linear"]["median_s"] == statistics.median(bf16_all_linear)
    assert switches["int8"]["all_linear"]["max_s"] == max(s["switch_s"] for s in runs[3]["voices"] if s["voice"] == "all_linear")
    assert switches["int8"]["none"]["switches"] == 3 and switches["int8"]["none"]["driver_used_gb_after_max"] < 3.3
    ready = open_to_ready(runs)
    assert set(ready) == {"bf16 first", "bf16 second", "int8 first"}
    assert ready["bf16 first"]["most_s"] == max(runs[0]["open_s"], runs[2]["open_s"]) and ready["bf16 first"]["within_limit"]
    assert not ready["bf16 second"]["within_limit"] and ready["bf16 second"]["limit_s"] == 3.0
    verdicts = [_verdicts(run) for run in runs]
    assert all(v["voice_switch_median_at_most_0.25_s"] is False for v in verdicts)  # 0.25-0.98 s then
    assert [v.get("ready_within_3_s") for v in verdicts] == [None, False, None, None]
    assert verdicts[0]["ready_within_8_s"] and not verdicts[3]["ready_within_8_s"] and verdicts[0]["every_voice_switched"]
    assert not any(v["encoder_rungs_all_captured_behind_ready"] for v in verdicts)  # all captured before ready then
    small.update(voice_switches=switches, open_to_ready=ready)
    text = "\n".join(small_cards_lines(small))
    assert "| bf16 second | 4.21 | 3 | NO | n/a |" in text
    assert f"| int8 | all_linear | 2 | {switches['int8']['all_linear']['median_s']:.3f} |" in text
    results = {"small_cards": small, "engine_startup": {}}
    _attach_app_startup(results)
    assert results["engine_startup"]["app_open_to_ready"] is ready
