"""The engine thread's side of training a voice: the wizard's clips recorded, played and transcribed, and the
training process started, watched and stopped, with the GPU handed over to it and taken back.

Training runs in a process of its own (`voicechat voice-train --json-progress`, engine/tools/voice_train.py): an
out-of-memory error or a crash there ends that process only, and the window, the conversation and the user's
data are untouched. A reader thread turns the process's JSON lines into events for the window; when the process
has ended, it puts `TrainingProcessEnded` on the command queue, so that what follows (bringing the chat model
back) runs on the engine thread, at a quiet point, like every other command.

When the card has no room for both, the chat model is unloaded before the process starts (the engine's phase is
then TRAINING: the conversation pauses) and loaded again after it ends, with the conversation given back to it
from the history, as "continue" does.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engine import paths
from engine import protocol as p
from engine.constants import ANSWER_SAMPLE_RATE
from engine.errors import UserFacingError, VoiceTrainingError
from engine.worker.table import Phase, TrainingProcessEnded

log = logging.getLogger(__name__)

# Room the chat model keeps beside a training that runs with it: a step of the smallest useful batch.
TRAINING_POSITIONS_BESIDE_CHAT = 2048


@dataclass
class _Clip:
    request: p.StartClip
    press_seq: int | None = None


class VoiceTrainingHost:
    """What the engine thread knows about the wizard's recording and the training process. One per worker."""

    def __init__(self, worker: Any) -> None:
        self.worker = worker
        self.clip: _Clip | None = None
        self.process: subprocess.Popen | None = None
        self.reload: p.Load | None = None  # the chat model to bring back after the training, when it was unloaded
        self.resume_conversation: int | None = None  # the saved conversation to give back to it
        self.log_offset = 0  # where this run's lines begin in the training log
        self.paused_records: list[Any] = []  # the conversation's records while the chat model is unloaded

    @property
    def holds_gpu(self) -> bool:
        """The chat model was unloaded for a training that still runs (or has not been taken back from yet)."""
        return self.reload is not None

    # ------------------------------------------------------------------ clips

    def start_clip(self, command: p.StartClip) -> None:
        worker = self.worker
        if worker.phase is Phase.RECORDING:
            return  # a take or a clip is being recorded already
        recorder = worker.takes.recorder or worker.takes.open()
        if recorder is not None:
            recorder.deliver_device_audio = True  # a clip keeps the microphone's full band (the model speaks 24 kHz)
        if worker.takes.press(command.at):
            self.clip = _Clip(command, worker.takes.press_seq)
            worker._set_phase(Phase.RECORDING)

    def stop_clip(self, command: p.StopClip) -> None:
        if self.clip is None or self.worker.phase is not Phase.RECORDING:
            return
        if command.keep:
            self.worker.takes.release(command.at)
        else:
            self.worker.takes.drop()
            self._clip_done()

    def takes_clip(self, take: Any) -> bool:
        """Called with every take the recorder delivers: True when it was the wizard's clip (now saved)."""
        if self.clip is None or self.clip.press_seq != int(take.press_seq):
            return False
        request = self.clip.request
        self._clip_done()
        from engine.audio.resample import resample
        from engine.voices.clip_check import check_clip, trim_silence
        from engine.voices.dataset import ScriptLine, VoiceData

        audio = take.device_audio if getattr(take, "device_audio", None) is not None else take.audio
        rate = take.device_rate if getattr(take, "device_audio", None) is not None else take.sample_rate
        samples = resample(np.asarray(audio, dtype=np.float32), int(rate), ANSWER_SAMPLE_RATE)
        check = check_clip(samples, ANSWER_SAMPLE_RATE)
        problems = tuple(p.MessagePart(problem.message.template, tuple(sorted(problem.message.values.items())))
                         for problem in check.problems)
        if check.speech_seconds <= 0:  # nothing to keep: the reason is said, no file is written
            self.worker._post(p.ClipRecorded(request.data_dir, "", check.duration_seconds, problems, request.script_index, saved=False))
            return True
        data = VoiceData(Path(request.data_dir))
        trimmed = trim_silence(samples, ANSWER_SAMPLE_RATE)
        if request.replaces:
            clip = data.replace_clip(request.replaces, trimmed, ANSWER_SAMPLE_RATE)
        else:
            origin = ScriptLine(request.script_index) if request.script_index is not None else None
            clip = data.add_clip(trimmed, ANSWER_SAMPLE_RATE, request.text, origin)
        self.worker._post(p.ClipRecorded(request.data_dir, clip.name, clip.seconds, problems, request.script_index))
        return True

    def _clip_done(self) -> None:
        self.clip = None
        recorder = self.worker.takes.recorder
        if recorder is not None:
            recorder.deliver_device_audio = False

    def play(self, command: p.PlayClip) -> None:
        from engine.audio.wav import read_wav_mono

        try:
            samples = read_wav_mono(Path(command.path), ANSWER_SAMPLE_RATE)
        except Exception as error:
            raise VoiceTrainingError.of("{file} cannot be played: {error}", file=command.path, error=error) from error
        self.worker._play_recorded(samples, ANSWER_SAMPLE_RATE)

    def transcribe(self, command: p.TranscribeClip) -> None:
        session = self.worker.session
        if session is None:
            raise VoiceTrainingError.of("Load a model to transcribe clips: the model itself hears them.")
        from engine.voices.dataset import VoiceData
        from engine.voices.transcribe import transcribe

        samples = VoiceData(Path(command.data_dir)).read_clip(command.name)
        text = transcribe(session.loaded, samples, ANSWER_SAMPLE_RATE)
        self.worker._post(p.ClipTranscribed(command.data_dir, command.name, text))

    # ------------------------------------------------------------------ the plan

    def plan(self, command: p.PlanVoiceTraining) -> p.VoiceTrainingPlan:
        """Memory and time for this card, and whether the chat model has to make room."""
        import torch

        from engine.voices import plan as voice_plan
        from engine.voices.adapter import DEFAULT_RANK, DEFAULT_TARGETS
        from engine.voices.batches import TokenBudget
        from engine.voices.dataset import VoiceData
        from engine.voices.trainer import default_epochs

        folder = self._model_folder()
        data = VoiceData(Path(command.data_dir))
        seconds = data.total_seconds()
        clips = len(data.clips())
        budget = TokenBudget(TRAINING_POSITIONS_BESIDE_CHAT, int(TRAINING_POSITIONS_BESIDE_CHAT * voice_plan.AUDIO_SHARE))
        need = voice_plan.memory_plan(folder, precision=command.precision, rank=DEFAULT_RANK, targets=DEFAULT_TARGETS, budget=budget).total
        work = voice_plan.speech_work(seconds, clips, default_epochs(seconds))
        session = self.worker.session
        device = getattr(getattr(session, "loaded", None), "device", None)
        if torch.cuda.is_available():
            index = torch.cuda.current_device()
            name = torch.cuda.get_device_name(index)
            free = voice_plan.device_free_bytes(torch.device("cuda", index))
            held = torch.cuda.memory_reserved(index) if device is not None and device.type == "cuda" else 0
            alone = voice_plan.budget_for(free + held, folder, precision=command.precision, rank=DEFAULT_RANK, targets=DEFAULT_TARGETS)
            tflops = voice_plan.card_tensor_tflops(name, torch.cuda.get_device_properties(index))
            estimate = voice_plan.estimated_seconds(*work, alone or budget, tflops)
            plan_ = p.VoiceTrainingPlan(command.data_dir, command.precision, clips, seconds / 60, need, free, free + held,
                                        unload_needed=need > free and held > 0, fits=need <= free + held,
                                        estimated_seconds=estimate, device_name=name, rank=DEFAULT_RANK)
        else:
            plan_ = p.VoiceTrainingPlan(command.data_dir, command.precision, clips, seconds / 60, need, None, None,
                                        unload_needed=False, fits=True, estimated_seconds=None, device_name="CPU",
                                        rank=DEFAULT_RANK)
        return plan_

    def post_plan(self, command: p.PlanVoiceTraining) -> None:
        self.worker._post(self.plan(command))

    def _model_folder(self) -> Path:
        session = self.worker.session
        if session is not None:
            return Path(session.loaded.folder)
        if self.reload is not None or self.worker.last_load is not None:
            raise VoiceTrainingError.of("The model is not loaded; load it to plan or start a training.")
        raise VoiceTrainingError.of("Load a model first: a voice is trained on the model the app talks with.")

    # ------------------------------------------------------------------ the process

    def start(self, command: p.StartVoiceTraining) -> None:
        worker = self.worker
        if self.process is not None:
            raise VoiceTrainingError.of("A voice is already training; wait for it to end or stop it first.")
        if worker.session is None:
            raise VoiceTrainingError.of("Load a model first: a voice is trained on the model the app talks with.")
        plan_ = self.plan(p.PlanVoiceTraining(command.data_dir, command.precision))
        if not plan_.fits:
            raise VoiceTrainingError.of(
                "This GPU cannot train a voice: it needs about {need} GB, and {free} GB are free even without the chat "
                "model. Choose the int8 base, or close programs that use the GPU.",
                need=f"{plan_.need_bytes / 1e9:.1f}", free=f"{(plan_.free_if_unloaded_bytes or 0) / 1e9:.1f}")
        base = worker.session.voices.model_id
        model = ["--demo"] if worker.last_load is not None and worker.last_load.demo else ["--model", str(worker.session.loaded.folder)]
        arguments = [str(command.data_dir), str(command.out_dir), *model, "--precision", command.precision, "--json-progress"]
        arguments += ["--steps", str(command.steps)] if command.steps else []
        arguments += ["--rank", str(command.rank)] if command.rank else []
        arguments += ["--resume"] if command.resume else []
        arguments += ["--replace"] if command.replace else []
        arguments += ["--base-model", base] if base else []
        if plan_.unload_needed:
            self._unload()
        log_file = training_log()
        log_file.parent.mkdir(parents=True, exist_ok=True)
        self.log_offset = log_file.stat().st_size if log_file.exists() else 0
        try:
            self.process = subprocess.Popen(
                training_command(arguments), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log_file.open("ab"),
                env=_child_environment(), **_no_console_window(),
            )
        except OSError as error:
            self._take_back()
            raise VoiceTrainingError.of("The training could not be started: {error}", error=error) from error
        threading.Thread(target=self._read, args=(self.process, command.out_dir), name="voice-training-reader", daemon=True).start()

    def cancel(self, command: p.CancelVoiceTraining) -> None:
        process = self.process
        if process is None or process.stdin is None:
            return
        try:
            process.stdin.write(b"cancel\n")
            process.stdin.flush()
        except OSError:  # it has ended meanwhile
            pass

    def _read(self, process: subprocess.Popen, out_dir: str) -> None:
        """On the reader thread: the process's events to the window; its end to the engine thread."""
        last: dict = {}
        assert process.stdout is not None
        for raw in process.stdout:
            try:
                event = json.loads(raw)
            except ValueError:
                continue
            if not isinstance(event, dict):
                continue
            last = event
            translated = _event(event)
            if translated is not None:
                self.worker._post(translated)
        code = process.wait()
        self.worker._commands.put(TrainingProcessEnded(code, out_dir, last))

    def ended(self, command: TrainingProcessEnded) -> None:
        self.process = None
        last = command.last
        if command.exit_code == 0:
            ended = p.VoiceTrainingEnded("done", command.out_dir, int(last.get("step", 0)))
        elif command.exit_code == 130 or last.get("event") == "cancelled":
            ended = p.VoiceTrainingEnded("cancelled", command.out_dir, int(last.get("step", 0)))
        elif last.get("event") == "failed":  # a failure the process explained (translatable)
            values = last.get("values") if isinstance(last.get("values"), dict) else {}
            ended = p.VoiceTrainingEnded("failed", command.out_dir, int(last.get("step", 0)), str(last.get("message", "")),
                                         str(last.get("template", "")), tuple(sorted((k, str(v)) for k, v in values.items())))
        else:  # it crashed: its last words from the log
            template = "The training process stopped unexpectedly (status {status}); the last checkpoint is kept. {detail}"
            values = {"status": str(command.exit_code), "detail": self._log_tail()}
            ended = p.VoiceTrainingEnded("failed", command.out_dir, int(last.get("step", 0)), template.format(**values),
                                         template, tuple(sorted(values.items())))
        self.worker._post(ended)
        self._take_back()

    def _log_tail(self, lines: int = 3) -> str:
        """The last lines the process wrote to its log (its traceback's end, where it crashed)."""
        try:
            with training_log().open("rb") as f:
                f.seek(self.log_offset)
                text = f.read().decode("utf-8", errors="replace")
        except OSError:
            return ""
        return " / ".join([line.strip() for line in text.splitlines() if line.strip()][-lines:])

    def shutdown(self) -> None:
        """The app is closing: the training stops with a checkpoint (it can be resumed at the next start)."""
        process = self.process
        if process is None:
            return
        self.cancel(p.CancelVoiceTraining())
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()

    # ------------------------------------------------------------------ sharing a voice

    # Their failures are of the kind "voice_sharing" whatever raised them (a voice that does not load raises
    # LoraError, whose kind "lora" the window reads as a refused voice switch).

    def export(self, command: p.ExportVoice) -> None:
        from engine.voices.voice_card import export_voice

        try:
            export_voice(Path(command.folder), Path(command.zip_path))
        except UserFacingError as error:
            self.worker._post(p.EngineError.from_exception("voice_sharing", error))
            return
        self.worker._post(p.VoiceExported(command.folder, command.zip_path))

    def import_zip(self, command: p.ImportVoice) -> None:
        from engine.voices.voice_card import import_voice

        try:
            folder = import_voice(Path(command.zip_path), paths.voices_dir())
        except UserFacingError as error:
            self.worker._post(p.EngineError.from_exception("voice_sharing", error))
            return
        self.worker._post(p.VoiceImported(command.zip_path, str(folder)))

    # ------------------------------------------------------------------ the GPU

    def _unload(self) -> None:
        """Give the GPU to the training: the chat model goes; the conversation stays saved in the history."""
        worker = self.worker
        self.reload = worker.last_load
        self.resume_conversation = worker.history.live_conversation_id() if worker.book.records else None
        # The conversation pauses: what the engine keeps of it waits here (the window is not told to clear it), and
        # comes back with the model (engine/worker/loading.py starts a reloaded model with no records).
        self.paused_records = worker.book.snapshot()
        worker.book.clear()
        session, worker.session = worker.session, None
        worker._set_phase(Phase.TRAINING)
        session.close()
        _release_cuda_memory()

    def _take_back(self) -> None:
        """The training is over: the chat model comes back (with the conversation it had), if it was unloaded."""
        load, self.reload = self.reload, None
        conversation, self.resume_conversation = self.resume_conversation, None
        worker = self.worker
        if load is None:
            return
        paused, self.paused_records = self.paused_records, []
        worker._set_phase(Phase.NO_MODEL)
        worker._submit(load)
        if worker.session is None:
            return
        if conversation is not None:  # the model is given the conversation back from the history, as "continue" does
            worker._submit(p.ContinueHistory(conversation))
        elif paused:  # not saved (the user said so): replay and export keep it, the model starts without it
            for record in paused:
                worker.book.add(record)
            message = "The conversation goes on, but the model starts without its memory of it: it was not saved in the history."
            worker._post(p.EngineNotice(message, template=message))


def training_log() -> Path:
    """Where the training process writes what it prints for people (its stderr), run after run."""
    return paths.log_dir() / "voice-training.log"


def training_command(arguments: list[str]) -> list[str]:
    """The `voicechat voice-train` command line: the installed app's own executable, or this Python."""
    if getattr(sys, "frozen", False):  # the PyInstaller bundle: VoiceChat.exe takes the subcommands itself
        return [sys.executable, "voice-train", *arguments]
    return [sys.executable, "-m", "app", "voice-train", *arguments]


def _child_environment() -> dict[str, str]:
    """This process's environment, with this source tree importable when not running from the bundle."""
    import os

    environment = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if not getattr(sys, "frozen", False):
        root = str(Path(__file__).resolve().parents[2])
        environment["PYTHONPATH"] = os.pathsep.join(filter(None, [root, environment.get("PYTHONPATH")]))
    return environment


def _no_console_window() -> dict[str, Any]:
    if sys.platform == "win32":
        return {"creationflags": subprocess.CREATE_NO_WINDOW}
    return {}


def _release_cuda_memory() -> None:
    import gc

    gc.collect()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except Exception:  # noqa: BLE001 - only a cache
        log.exception("emptying the CUDA cache failed")


def _event(event: dict) -> p.Event | None:
    """The process's JSON event as the window's event (None for those the window does not show)."""
    kind = event.get("event")

    def number(key: str) -> float | None:
        value = event.get(key)
        return float(value) if isinstance(value, (int, float)) else None

    if kind == "encode":
        return p.VoiceTrainingProgress("encode", int(event.get("done", 0)), int(event.get("total", 0)))
    if kind in ("start", "loaded"):
        return p.VoiceTrainingProgress("load", int(event.get("step", 0)), int(event.get("steps", 0)))
    if kind == "step":
        return p.VoiceTrainingProgress("train", int(event["step"]), int(event["steps"]), number("loss"), number("text_loss"),
                                       number("audio_loss"), number("eta_seconds"))
    if kind == "held_out":
        return p.VoiceTrainingHeldOut(int(event["step"]), float(event["loss"]))
    if kind == "preview":
        return p.VoiceTrainingPreview(int(event["step"]), str(event["file"]))
    return None


HANDLERS: dict[type, Callable[[Any, Any], None]] = {
    p.StartClip: lambda worker, command: worker.voice_training.start_clip(command),
    p.StopClip: lambda worker, command: worker.voice_training.stop_clip(command),
    p.PlayClip: lambda worker, command: worker.voice_training.play(command),
    p.TranscribeClip: lambda worker, command: worker.voice_training.transcribe(command),
    p.PlanVoiceTraining: lambda worker, command: worker.voice_training.post_plan(command),
    p.StartVoiceTraining: lambda worker, command: worker.voice_training.start(command),
    p.CancelVoiceTraining: lambda worker, command: worker.voice_training.cancel(command),
    TrainingProcessEnded: lambda worker, command: worker.voice_training.ended(command),
    p.ExportVoice: lambda worker, command: worker.voice_training.export(command),
    p.ImportVoice: lambda worker, command: worker.voice_training.import_zip(command),
}

