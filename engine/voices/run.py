"""One training run, from the user's clips to a published voice (or a checkpoint to resume from).

`train_voice` is the whole run as the `voice-train` process executes it; every step reports an event (a small
dict, written by the CLI as a JSON line for the app) and training.json follows the run. What the user made is
never at risk: the clips are only read, a voice already in the output folder is replaced only when asked (and
only once the new one is finished), and a cancel, a crash or an out-of-memory error leaves the last
checkpoint, from which `resume` goes on exactly as the run would have.
"""

from __future__ import annotations

import io
import logging
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import soundfile
import torch

from engine.constants import ANSWER_SAMPLE_RATE
from engine.errors import GpuMemoryError, ModelFilesError, VoiceTrainingError
from engine.files import write_atomically
from engine.model.store import MIMI_CHECKPOINT, check_model_folder
from engine.voices import plan
from engine.voices.batches import TokenBudget, default_steps
from engine.voices.run_files import Checkpoint, TrainingLog, checkpoint_path, preview_path, work_dir
from engine.voices.samples import Clip
from engine.voices.trainer import (
    CHECKPOINTS_PER_RUN, CPU_BUDGET, MIN_STEPS_BETWEEN_CHECKPOINTS, PreparedData, TrainingOptions, VoiceTrainer,
    default_epochs, prepare_samples,
)
from engine.voices.voice_card import VoiceCard, holds_voice, now_iso, publish_voice

log = logging.getLogger(__name__)

Event = dict[str, object]


@dataclass(frozen=True)
class RunRequest:
    clips: Sequence[Clip]
    out_dir: Path
    model_folder: Path
    base_model: str | None  # the model id the adapter names (the Hub id where known)
    options: TrainingOptions
    device: torch.device
    resume: bool = False
    replace: bool = False  # the user agreed to replace a voice already in out_dir (once the new one is done)


def check_request(request: RunRequest) -> None:
    """Refuse, before anything is loaded or written, what cannot be done as asked."""
    out_dir = request.out_dir
    has_run = checkpoint_path(out_dir).is_file()
    if request.resume and not has_run:
        raise VoiceTrainingError.of("There is no unfinished training in {folder} to resume.", folder=out_dir)
    if not request.resume and has_run and not request.replace:
        raise VoiceTrainingError.of(
            "{folder} holds an unfinished training. Resume it, or choose another folder for a new voice.", folder=out_dir
        )
    if holds_voice(out_dir) and not (request.replace or request.resume):
        raise VoiceTrainingError.of(
            "{folder} already holds a voice. Choose another folder, or confirm that the new voice replaces it.", folder=out_dir
        )
    if out_dir.exists() and not out_dir.is_dir():
        raise VoiceTrainingError.of("{folder} is a file, not a folder.", folder=out_dir)
    problems = check_model_folder(request.model_folder)
    if problems:
        raise ModelFilesError(request.model_folder, problems)
    if not (request.model_folder / MIMI_CHECKPOINT).is_file():
        raise VoiceTrainingError.of(
            "The model folder {folder} has no audio tokenizer ({file}), which training needs to turn speech into the "
            "model's audio codes. Download the model again (the app fetches the file) or copy the file into the folder.",
            folder=request.model_folder, file=MIMI_CHECKPOINT,
        )
    if not request.clips:
        raise VoiceTrainingError.of("There are no clips to train on.")


def train_voice(request: RunRequest, *, on_event: Callable[[Event], None], should_stop: Callable[[], bool]) -> TrainingLog:
    check_request(request)
    out_dir, device = request.out_dir, request.device
    checkpoint = _read_checkpoint(out_dir) if request.resume else None
    if checkpoint is not None:  # a resumed run is the same run: its options, batches and steps are the checkpoint's
        options, budget, steps, every = _resumed_options(checkpoint, request.options)
    else:
        options, budget, steps, every = request.options, request.options.budget, request.options.steps, request.options.checkpoint_every
        if request.replace:
            shutil.rmtree(work_dir(out_dir), ignore_errors=True)  # a new run: an unfinished one there is dropped
    interleave = _interleave(request.model_folder)
    data = prepare_samples(request.clips, request.model_folder, out_dir, device=device, interleave=interleave,
                           codebooks=_codebooks(request.model_folder), on_event=on_event, should_stop=should_stop)
    if data is None:
        on_event({"event": "cancelled", "step": checkpoint.step if checkpoint else 0})
        return TrainingLog(status="cancelled")
    budget = budget or _budget(request)
    steps = steps or default_steps(data.train, budget, epochs=default_epochs(data.seconds), at_least=plan.MIN_DEFAULT_STEPS)
    every = every or max(MIN_STEPS_BETWEEN_CHECKPOINTS, steps // CHECKPOINTS_PER_RUN)
    record = TrainingLog(steps=steps, device=_device_name(device), precision=options.precision,
                         options={**asdict(options), "budget": asdict(budget), "steps": steps, "checkpoint_every": every},
                         data={"clips": data.clips, "held_out_clips": len(data.held_out), "minutes": data.seconds / 60})
    on_event({"event": "start", "steps": steps, "clips": data.clips, "held_out": len(data.held_out),
              "minutes": data.seconds / 60, "budget_positions": budget.positions, "precision": options.precision})

    from engine.model.loading import load_model

    started = time.monotonic()
    loaded = load_model(request.model_folder, device=device, precision=options.precision)
    trainer = VoiceTrainer(loaded, data, options, budget, steps, base_model=request.base_model)
    if checkpoint is not None:
        trainer.restore(checkpoint)
        record = TrainingLog.from_dict({**checkpoint.log, "status": "running"})
    on_event({"event": "loaded", "seconds": time.monotonic() - started, "step": trainer.step})
    try:
        stopped = _steps(trainer, record, every, out_dir, on_event, should_stop)
        if stopped:
            record.status = "cancelled"
            record.write(out_dir)
            on_event({"event": "cancelled", "step": trainer.step})
            return record
        _publish(trainer, record, request, data)
    except torch.OutOfMemoryError as error:
        record.status, record.error = "failed", "out of GPU memory"
        record.write(out_dir)
        raise GpuMemoryError.of(
            "The GPU ran out of memory while training the voice (step {step}); the last checkpoint is kept. Close "
            "programs that use the GPU, or train with the int8 base, and resume.", step=trainer.step,
        ) from error
    on_event({"event": "done", "step": trainer.step, "folder": str(out_dir)})
    return record


def _resumed_options(checkpoint: Checkpoint, asked: TrainingOptions) -> tuple[TrainingOptions, TokenBudget, int, int]:
    stored = dict(checkpoint.log.get("options", {}))
    budget = TokenBudget(**stored.pop("budget"))
    steps, every = int(stored.pop("steps")), int(stored.pop("checkpoint_every"))
    known = set(TrainingOptions.__dataclass_fields__) - {"budget", "steps", "checkpoint_every", "previews"}
    options = TrainingOptions(**{key: value for key, value in stored.items() if key in known}, budget=budget, steps=steps,
                              checkpoint_every=every, previews=asked.previews)
    return options, budget, steps, every


def _steps(trainer: VoiceTrainer, record: TrainingLog, every: int, out_dir: Path,
           on_event: Callable[[Event], None], should_stop: Callable[[], bool]) -> bool:
    """Train to the last step; True when a stop request ended it early (after a checkpoint)."""
    last_saved = trainer.step
    while trainer.step < trainer.steps:
        if should_stop():
            if trainer.step > last_saved:
                _checkpoint(trainer, record, out_dir, on_event, preview=False)
            return True
        began = time.monotonic()
        losses = trainer.train_step()
        record.seconds += time.monotonic() - began
        record.step = trainer.step
        record.tokens += int(losses.pop("tokens"))
        record.losses.append({"step": trainer.step, **losses, "seconds": record.seconds})
        _track_memory(record, trainer.device)
        eta = record.seconds / max(1, len(record.losses)) * (trainer.steps - trainer.step)
        on_event({"event": "step", "step": trainer.step, "steps": trainer.steps, **losses, "eta_seconds": eta})
        if trainer.step % every == 0 or trainer.step == trainer.steps:
            _checkpoint(trainer, record, out_dir, on_event, preview=trainer.options.previews)
            last_saved = trainer.step
        else:
            record.write(out_dir)
    return False


def _checkpoint(trainer: VoiceTrainer, record: TrainingLog, out_dir: Path, on_event: Callable[[Event], None], *, preview: bool) -> None:
    began = time.monotonic()
    held_out = trainer.held_out_loss()
    if held_out is not None:
        record.held_out.append({"step": trainer.step, **held_out})
        on_event({"event": "held_out", "step": trainer.step, **held_out})
    if preview:
        path = preview_path(out_dir, trainer.step)
        write_atomically(path, _wav_bytes(trainer.preview()))
        record.previews.append({"step": trainer.step, "file": str(path.relative_to(out_dir))})
        on_event({"event": "preview", "step": trainer.step, "file": str(path)})
    record.seconds += time.monotonic() - began
    trainer.checkpoint(record).save(out_dir)
    record.write(out_dir)
    on_event({"event": "checkpoint", "step": trainer.step})


def _publish(trainer: VoiceTrainer, record: TrainingLog, request: RunRequest, data: PreparedData) -> None:
    out_dir = request.out_dir
    staged = work_dir(out_dir) / "final"
    shutil.rmtree(staged, ignore_errors=True)
    from engine.voices.adapter import save_adapter

    save_adapter(trainer.model, staged)
    previews = [entry for entry in record.previews if entry["step"] == trainer.step]
    preview = (out_dir / previews[-1]["file"]).read_bytes() if previews else None
    card = VoiceCard(
        name=out_dir.name, minutes=round(data.seconds / 60, 2), clips=data.clips, steps=trainer.step,
        held_out_loss=record.held_out[-1]["loss"] if record.held_out else None,
        train_loss=record.losses[-1]["loss"] if record.losses else None, created=now_iso(),
        base_model=request.base_model, precision=request.options.precision, rank=request.options.rank,
    )
    record.status = "done"
    publish_voice(staged, out_dir, card, preview)
    record.write(out_dir)
    shutil.rmtree(work_dir(out_dir), ignore_errors=True)  # the checkpoint and the cache are not needed any more


def _read_checkpoint(out_dir: Path) -> Checkpoint:
    try:
        checkpoint = Checkpoint.load(out_dir)
    except Exception as error:  # torch's own errors for a damaged file
        raise VoiceTrainingError.of("The checkpoint in {folder} is damaged ({error}); train again into a new folder.",
                                    folder=out_dir, error=error) from error
    assert checkpoint is not None  # check_request made sure it is there
    return checkpoint


def _budget(request: RunRequest) -> TokenBudget:
    if request.device.type != "cuda":
        return CPU_BUDGET
    free = plan.device_free_bytes(request.device)
    options = request.options
    budget = plan.budget_for(free, request.model_folder, precision=options.precision, rank=options.rank, targets=options.targets)
    if budget is None:
        need = plan.memory_plan(request.model_folder, precision=options.precision, rank=options.rank, targets=options.targets,
                                budget=TokenBudget(plan.MIN_BUDGET_POSITIONS, int(plan.MIN_BUDGET_POSITIONS * plan.AUDIO_SHARE)))
        if options.precision == "bf16":
            raise VoiceTrainingError.of(
                "This GPU has {free} GB free, but training a voice with the bf16 base needs about {need} GB. Close "
                "programs that use the GPU, or choose the int8 base.", free=f"{free / plan.GB:.1f}", need=f"{need.total / plan.GB:.1f}")
        raise VoiceTrainingError.of(
            "This GPU has {free} GB free, but training a voice needs about {need} GB even with the int8 base. Close "
            "programs that use the GPU.", free=f"{free / plan.GB:.1f}", need=f"{need.total / plan.GB:.1f}")
    return budget


def _track_memory(record: TrainingLog, device: torch.device) -> None:
    if device.type != "cuda":
        return
    free, total = torch.cuda.mem_get_info(device)
    # The allocator's peak added to what the driver counts beside it (context, libraries) now.
    driver_peak = total - free - torch.cuda.memory_reserved(device) + torch.cuda.max_memory_reserved(device)
    record.peak_memory_bytes = max(record.peak_memory_bytes or 0, int(driver_peak))
    record.peak_allocated_bytes = int(torch.cuda.max_memory_allocated(device))


def _wav_bytes(samples: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    soundfile.write(buffer, np.clip(samples, -1, 1).astype(np.float32), ANSWER_SAMPLE_RATE, format="WAV", subtype="PCM_16")
    return buffer.getvalue()


def _device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"


def _config(folder: Path) -> dict:
    import json

    return json.loads((folder / "config.json").read_text(encoding="utf-8"))


def _interleave(folder: Path) -> tuple[int, int]:
    config = _config(folder)
    return int(config["interleaved_n_text"]), int(config["interleaved_n_audio"])


def _codebooks(folder: Path) -> int:
    return int(_config(folder)["codebooks"])
