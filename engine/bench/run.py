"""`voicechat bench`: eager vs recipe vs engine, side by side, in one run, on the full-size model.

The main flow: load (or make) the model as the app does, then mode by mode (engine first, as in the app's
own process), each in both samplings (top_k=4 at temperature 1.0, and greedy); the engine's long
conversation after its mode; the engine's kernel profile and the card estimates last; then the sections
in SECTIONS. bench.json and bench.md are rewritten after every mode.
"""

from __future__ import annotations

import argparse
import gc
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from engine.bench.baselines import run_eager, run_recipe
from engine.bench.cards import estimate_cards
from engine.bench.engine_mode import EngineBench
from engine.bench.long_conversation import long_conversation
from engine.bench.report import environment, markdown, summaries, summary, write_results
from engine.bench.results_folder import new_run_folder
from engine.bench.workload import FRAME_SECONDS, TURNS, copy_bandwidth_gbs, make_workload, stage_bytes
from engine.protocol import SamplingSettings

# Sections measured after the modes, each under its own key of bench.json: name -> a function of the bench's
# arguments that returns the section's results (run in this order; one that raises records its error there
# and loses nothing else). They run after the bench has let go of its model and graphs (the device as a fresh
# process finds it, but for this process's CUDA context).


def _small_cards(args: argparse.Namespace) -> dict[str, Any]:
    from engine.bench.small_cards import run_small_cards

    return run_small_cards(Path(args.out)) if getattr(args, "small_cards", True) else {"skipped": "--no-small-cards"}


def _voice_training(args: argparse.Namespace) -> dict[str, Any]:
    from engine.bench.voice_training import run_voice_training

    if not getattr(args, "voice_training", True):
        return {"skipped": "--no-voice-training"}
    return run_voice_training(Path(args.out))


SECTIONS: dict[str, Callable[[argparse.Namespace], dict[str, Any]]] = {"small_cards": _small_cards, "voice_training": _voice_training}
# "engine-int8": the same engine on an int8 copy of the model (engine/model/quantized.py), made after the bf16
# engine's runs, with its own stage bytes, kernel profile and card estimates, and the teacher-forced
# agreement of int8 with bf16 per stream and of their audio decoders (engine/chat/precision_check.py).
MODES = ("engine", "engine-int8", "recipe", "eager")
# The bench's agreement turn: longer than the app's check (48 text steps, 72 frames).
AGREEMENT_ROUNDS = 8


def _int8_copy(loaded):
    """The bench's model with its large matrices int8 and its audio detokenizer's transformer bf16, as the app
    loads them (quantized and cast in memory here; the processor is a copy that holds the int8 precision's
    detokenizer, so its stage bytes are that detokenizer's)."""
    import copy
    import dataclasses

    from engine.model.loading import set_detokenizer_precision
    from engine.model.quantized import quantize_model

    model = copy.deepcopy(loaded.model)
    quantize_model(model, device=loaded.device)
    processor = copy.copy(loaded.processor)  # liquid-audio's processor is a plain object: the copy's detokenizer is its own
    if not loaded.uses_mimi:
        processor._audio_detokenizer = set_detokenizer_precision(copy.deepcopy(loaded.processor.audio_detokenizer), "int8")
    torch.cuda.empty_cache()
    return dataclasses.replace(loaded, model=model, processor=processor, precision="int8")


def _int8_section(bf16: EngineBench | None, int8: EngineBench, bandwidth: float, workload) -> dict[str, Any]:
    """int8's stage bytes and bandwidth floors, and its teacher-forced agreement with bf16 per stream and decoder."""
    from engine.chat.precision_check import compare_with_reference, record_reference
    from engine.model.quantized import weight_bytes

    bytes_per_stage = stage_bytes(int8.loaded)
    section: dict[str, Any] = {
        "stage_bytes": bytes_per_stage,
        "bytes_per_audio_frame": bytes_per_stage["backbone_step"] + bytes_per_stage["depthformer_frame"],
        "weights_on_gpu_bytes": weight_bytes(int8.loaded.model) + weight_bytes(int8.loaded.processor.audio_detokenizer),
        "floors_ms": {k: v / (bandwidth * 1e9) * 1e3 for k, v in bytes_per_stage.items()},
        "startup": int8.startup,
    }
    if bf16 is not None:
        section["bf16_weights_on_gpu_bytes"] = weight_bytes(bf16.loaded.model) + weight_bytes(bf16.loaded.processor.audio_detokenizer)
        prompt = bf16.session.check_prompt()
        reference = record_reference(bf16.backend, prompt, workload.n_text, workload.n_audio, rounds=AGREEMENT_ROUNDS,
                                     decoder=bf16.session.check_decoder)
        section["agreement_with_bf16"] = compare_with_reference(int8.backend, reference, decoder=int8.session.check_decoder).as_dict()
        bf16.session.reset()
        int8.session.reset()
    return section


def _attach_card_memory(results: dict[str, Any]) -> None:
    """Each consumer card's memory as small_cards measured it through the app's open path (the app's most by
    the driver's count, and the headroom a desktop leaves), beside the speed estimates: bf16's, and int8's."""
    small = results.get("small_cards") or {}
    for key, target in (("cards", results.get("card_estimates")), ("cards_int8", (results.get("int8") or {}).get("card_estimates"))):
        if small.get(key) and target is not None:
            target["memory_gb"] = small[key]


def _attach_app_startup(results: dict[str, Any]) -> None:
    """The app's own open-to-ready (first and second launch) and voice switches, as small_cards measured them through
    ChatSession.open, beside the engine's start-up (which the bench builds its own way)."""
    small = results.get("small_cards") or {}
    startup = results.get("engine_startup")
    if startup is not None and small.get("open_to_ready"):
        startup["app_open_to_ready"] = small["open_to_ready"]
        startup["app_voice_switches"] = small.get("voice_switches", {})


def run_bench(args: argparse.Namespace) -> int:
    from engine.bench.random_model import random_full_size_model
    from engine.tools.reply import quiet_library_logs

    quiet_library_logs()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = sorted(set(modes) - set(MODES))
    if unknown or not modes:
        print(f"error: unknown benchmark mode(s) {', '.join(unknown) or '(none given)'}; choose from {', '.join(MODES)}")
        return 2
    if not torch.cuda.is_available():
        print("error: the benchmark needs a CUDA GPU")
        return 2
    if not getattr(args, "out", None):  # no --out: a new folder of this run's own (the sections write there too)
        args.out = str(new_run_folder())
    torch.backends.cuda.matmul.allow_tf32 = False
    from engine.model.loading import use_expandable_cuda_segments

    expandable_segments = use_expandable_cuda_segments()  # as ChatSession.open does, before any weight
    from engine.realtime.kernels import compile_in_background

    compile_in_background(torch.device("cuda"))  # as ChatSession.open does: while the weights load
    if args.model:
        from engine.model.loading import load_model
        from engine.bench.random_model import suppress_stop_tokens

        loaded = load_model(args.model, device="cuda")
        suppress_stop_tokens(loaded.model)
    else:
        loaded = random_full_size_model()
    workload = make_workload(loaded)
    bandwidth = copy_bandwidth_gbs()
    bytes_per_stage = stage_bytes(loaded)
    floors = {k: v / (bandwidth * 1e9) * 1e3 for k, v in bytes_per_stage.items()}
    n_text, n_audio = workload.n_text, workload.n_audio
    block = n_text * (floors["backbone_step"] + floors["text_head"]) + n_audio * (
        floors["backbone_step"] + floors["depthformer_frame"] + floors["decoder_frame"]
    )
    floors["frame"] = block / n_audio
    floors["rtf"] = block / (n_audio * FRAME_SECONDS * 1e3)
    results: dict[str, Any] = {
        "environment": environment(),
        "workload": {"schedule": f"{n_text}:{n_audio}", "frames": workload.frames, "turns": TURNS, "max_new_tokens": workload.max_new_tokens},
        "copy_bandwidth_gbs": bandwidth,
        "allocator": {"expandable_segments": expandable_segments},
        "stage_bytes": bytes_per_stage,
        "floors_ms": floors,
        "modes": {},
        "summary": {},
        "notes": [],
    }
    samplings = {
        "sampled (top_k=4, temperature 1.0)": SamplingSettings(False, 1.0, 4, 1.0, 4),
        "greedy": SamplingSettings(greedy=True),
    }
    engine = EngineBench(loaded) if "engine" in modes else None
    engine_int8: EngineBench | None = None
    for label in samplings:
        results["modes"][label] = {}
    out = Path(args.out)
    # Mode by mode, both samplings each: the engine (first, as in the app's own process) is then
    # measured before any baseline has run, and no mode's leftovers land between another mode's runs.
    for done, mode in enumerate(modes):
        for label, sampling in samplings.items():
            print(f"[bench] {label}: {mode}", flush=True)
            try:
                if mode == "engine":
                    data = engine.run(workload, sampling)
                elif mode == "engine-int8":
                    if engine_int8 is None:
                        engine_int8 = EngineBench(_int8_copy(loaded))
                        results["int8"] = _int8_section(engine, engine_int8, bandwidth, workload)
                    data = engine_int8.run(workload, sampling)
                elif mode == "recipe":
                    data = run_recipe(loaded, workload, sampling)
                else:
                    data = run_eager(loaded, workload, sampling)
            except Exception as error:  # one broken mode must not lose the others' numbers
                import traceback

                traceback.print_exc()
                results["notes"].append(f"{mode} ({label}) failed: {type(error).__name__}: {error}")
                torch.cuda.synchronize()
                continue
            results["modes"][label][mode] = data
            print(json.dumps(summary(data)), flush=True)
        if mode == "engine" and engine is not None:
            results["engine_startup"] = engine.startup
            if getattr(args, "long_turns", 0):
                print(f"[bench] long conversation: {args.long_turns} turns", flush=True)
                try:
                    long = long_conversation(engine, workload, next(iter(samplings.values())), args.long_turns)
                except Exception as error:
                    import traceback

                    traceback.print_exc()
                    long = {"error": f"{type(error).__name__}: {error}"}
                results["long_conversation"] = long
                print(json.dumps({k: v for k, v in long.items() if k != "turns"}), flush=True)
        results["modes_not_run_yet"] = modes[done + 1 :]
        write_results(results, out)  # after every mode: what a call cut short by a time limit measured is kept
    if engine is not None:
        # Last: a profiler can leave its hooks behind, which would slow the baselines' launches.
        results["engine_kernels"] = engine.kernel_profile()
        results["summary"] = summaries(results)
        first = next(iter(samplings))
        if "engine" in results["summary"].get(first, {}):
            results["card_estimates"] = estimate_cards(results, first)
    if engine_int8 is not None and "int8" in results:
        int8 = results["int8"]
        int8["engine_kernels"] = engine_int8.kernel_profile()
        results["summary"] = summaries(results)
        first = next(iter(samplings))
        if "engine-int8" in results["summary"].get(first, {}):
            as_engine = {"engine": results["summary"][first]["engine-int8"]}
            view = {**results, "stage_bytes": int8["stage_bytes"], "engine_kernels": int8["engine_kernels"], "summary": {first: as_engine}}
            bf16_estimate = results.get("card_estimates")  # bf16's per-kernel cost, from this same run
            int8["card_estimates"] = estimate_cards(view, first, latency_reference=bf16_estimate["stages"] if bf16_estimate else None)
        write_results(results, out)
    if SECTIONS:
        engine = engine_int8 = loaded = None  # the models, the graphs and their pools: nothing of the modes stays on the device
        gc.collect()
        torch.cuda.empty_cache()
    for name, section in SECTIONS.items():  # the hook for further sections (see SECTIONS above)
        print(f"[bench] {name}", flush=True)
        try:
            results[name] = section(args)
        except Exception as error:  # a section must not lose the modes' numbers
            import traceback

            traceback.print_exc()
            results[name] = {"error": f"{type(error).__name__}: {error}"}
        write_results(results, out)
    _attach_card_memory(results)
    _attach_app_startup(results)
    recipe_error = next(
        (d.get("backbone_capture_error") for m in results["modes"].values() for d in m.values() if d.get("backbone_capture_error")), None
    )
    if recipe_error:
        results["notes"].append(f"recipe: the backbone graph over StaticCache could not be captured ({recipe_error}); it ran eagerly.")
    write_results(results, out)
    print(markdown(results))
    print(f"[bench] results written to {out.resolve()}", flush=True)
    return 0
