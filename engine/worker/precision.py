"""The weights' precision of a Load (`Load.precision`): bf16 as trained, or int8 weight-only, which is checked
against bf16 once per model and GPU before it is used (engine/chat/precision_check.py, the verdict kept with
engine/model/precision_verdicts.py).

What a Load with precision="int8" gets:
- No NVIDIA GPU: bf16, and the user is told why. int8 is refused on the CPU rather than allowed unchecked: the
  check needs the real-time GPU engine, so int8's quality would go unproven there, and it would buy nothing (the
  CPU runs the eager path, which dequantizes every matrix at every step: slower, not faster; and system memory
  is not what is short on such a PC).
- A verdict kept for this model and GPU: int8 at once if it passed; bf16 with the kept figures if it did not (the
  logits' figures where they failed, else the audio decoder's: `_refusal`). One kept before the check compared
  the audio decoders counts as none (engine/model/precision_verdicts.py).
- No verdict: the check. The bf16 reference comes from the loaded session when that is bf16 on the same model
  (its voice taken off for it), else from a bf16 session opened for it (with progress) and closed; then int8
  opens (without a voice) and is compared, the verdict is kept, and the voice is merged. A failed check closes
  int8 and reopens bf16, with the figures; an int8 that does not open at all (its error said) reopens bf16 too. A check that cannot run (an engine without CUDA graphs, an error in
  it) keeps bf16 and keeps no verdict.
- bf16 does not fit the card (GpuMemoryError while opening it for the reference): int8 without the check, and
  the user is told that the check could not run on this card.

Between the steps the engine reads commands as during any Load (the command table's LOADING column, through
`EngineWorker._between_pieces`): a Cancel or a new Load stops the check before int8 is opened (bf16 stays,
nothing is kept; a new Load then runs), a Shutdown ends it. The step itself (a session opening, the check's
turn) is not interrupted, as `ChatSession.open` is not.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from pathlib import Path
from typing import Any

from engine import protocol as p
from engine.errors import GpuMemoryError, LoraError, Message, UserFacingError
from engine.validation import PRECISIONS

log = logging.getLogger(__name__)


class PrecisionRefused(UserFacingError):
    """int8 was not used for this load; bf16 was (the message says why)."""

    kind = "precision"


class CheckStopped(Exception):
    """A Cancel, a new Load or a Shutdown arrived between two steps of the check."""


def gpu_name() -> str | None:
    """The GPU a session opens on (ChatSession.open's default device), or None on the CPU."""
    import torch

    from engine.model.loading import default_device

    device = default_device()
    return torch.cuda.get_device_name(device) if device.type == "cuda" else None


def model_folder(source: str | None, command: p.Load) -> Path:
    if command.demo:
        from engine.chat.session import ensure_demo_model

        return ensure_demo_model()
    return Path(str(source))


def worst_of(report: dict[str, Any]) -> str:
    """A kept report's worst stream (largest mean KL) with its figures, as PrecisionReport.worst says it."""
    streams = report.get("streams") or {}
    try:
        name = max(streams, key=lambda k: float(streams[k]["kl_mean"]))
        stream = streams[name]
        return f"{name}: KL {float(stream['kl_mean']):.3f}, top-1 {float(stream['top1']):.0%}"
    except (ValueError, KeyError, TypeError):
        return "?"


def _refused(worst: str, thresholds: dict[str, Any]) -> PrecisionRefused:
    return PrecisionRefused.of(
        "int8 was refused for this model on this GPU: its output differs too much from bf16 ({worst}; allowed: "
        "KL up to {max_kl}, text top-1 from {text_top1}). Standard precision (bf16) stays.",
        worst=worst, max_kl=f"{float(thresholds.get('max_kl', 0.1)):.2f}",
        text_top1=f"{float(thresholds.get('text_top1', 0.8)):.0%}",
    )


def _refusal(report: dict[str, Any]) -> PrecisionRefused:
    """Why a failed report (PrecisionReport.as_dict(), fresh or kept) refused int8: the logits' figures when they
    failed, else the audio decoder's (int8 runs the detokenizer's transformer in bf16)."""
    from engine.chat.precision_check import THRESHOLDS, streams_pass

    thresholds = {**dataclasses.asdict(THRESHOLDS), **(report.get("thresholds") or {})}
    decoder = report.get("decoder")
    try:
        logits_passed = streams_pass(report.get("streams") or {}, thresholds)
    except (KeyError, TypeError, ValueError):  # a damaged kept report: its figures are what is said
        logits_passed = False
    if not isinstance(decoder, dict) or not logits_passed:
        return _refused(worst_of(report), thresholds)
    return PrecisionRefused.of(
        "int8 was refused for this model on this GPU: its audio decoder, which int8 runs in bf16, differs too much "
        "from float32 (SNR {snr} dB over {frames} frames; allowed: from {min_snr} dB). Standard precision (bf16) stays.",
        snr=f"{float(decoder.get('snr_db', 0.0)):.1f}", frames=int(decoder.get("frames", 0)),
        min_snr=f"{float(thresholds['min_decoder_snr_db']):.0f}",
    )


def _notice(message: Message) -> p.EngineNotice:
    return p.EngineNotice(str(message), message.template, tuple(sorted(message.values.items())))


def _is_bf16_of(session: Any, folder: Path) -> bool:
    loaded = getattr(session, "loaded", None)
    if loaded is None or getattr(loaded, "precision", "bf16") != "bf16":
        return False
    try:
        return Path(loaded.folder).resolve() == folder.resolve()
    except (OSError, TypeError, AttributeError):
        return False


def _set_voice(session: Any, lora: str | None) -> None:
    """Merge `lora` (or none); a voice that cannot be merged is kept as the session's voice problem, as
    `ChatSession.open` does."""
    if getattr(session.voices, "voice_name", None) is None and lora is None:
        return
    try:
        session.switch_voice(lora)
    except LoraError as error:
        session.voice_problem = error


def _kept(session: Any, lora: str | None) -> Any:
    """A bf16 session that served (or was to serve) as the reference, kept as the loaded one: its cache emptied
    (the check's turn ran in it) and the Load's voice merged."""
    session.reset()
    _set_voice(session, lora)
    return session


class PrecisionOpener:
    """Opens the session of one Load at the precision it may have. `open_session(command)` is the plain opener
    (loading.open_session with the worker's opener and source)."""

    def __init__(self, worker: Any, source: str | None, command: p.Load, open_session: Any) -> None:
        self.worker = worker
        self.source = source
        self.command = command
        self._open = open_session
        self.cancel = threading.Event()
        # The request `PrecisionInUse` answers: the Load's, unless a newer Load stopped the check (then nothing
        # was refused, and the window must not set its choice back: the newer Load says what is wanted).
        self.requested = command.precision

    def _close_old(self) -> None:
        if self.worker.session is not None:
            # Free the old model before loading the new one: two copies rarely fit in VRAM.
            session, self.worker.session = self.worker.session, None
            session.close()

    def _open_plain(self, precision: str, lora: str | None = None, *, keep_voice: bool = True) -> Any:
        return self._open(dataclasses.replace(self.command, precision=precision,
                                              lora=self.command.lora if keep_voice else lora))

    def _between_steps(self) -> None:
        self.worker._between_pieces()
        if self.worker._stopping or self.cancel.is_set():
            raise CheckStopped

    def open(self) -> Any:
        """The new session (the old one closed, or used for the reference); None if a Shutdown stopped it."""
        if self.command.precision != "int8":
            self._close_old()
            return self._open_plain(self.command.precision)
        gpu = gpu_name()
        if gpu is None:
            self.worker._report(PrecisionRefused.of(
                "int8 needs an NVIDIA GPU: it is checked against bf16 on the GPU, and only the GPU engine runs it "
                "faster. Standard precision (bf16) is used."), "precision")
            self._close_old()
            return self._open_plain("bf16")
        from engine.model.precision_verdicts import load_verdict

        folder = model_folder(self.source, self.command)
        verdict = load_verdict(folder, gpu)
        if verdict is not None:
            self._close_old()
            if verdict["passed"]:
                return self._open_plain("int8")
            self.worker._report(_refusal(verdict), "precision")
            return self._open_plain("bf16")
        self.worker._helper_cancel = self.cancel  # a Cancel (or a new Load) stops the check between its steps
        try:
            return self._check(folder, gpu)
        finally:
            self.worker._helper_cancel = None

    def _check(self, folder: Path, gpu: str) -> Any:
        worker, post = self.worker, self.worker._post
        reference_session = None
        old, worker.session = worker.session, None
        try:
            if old is not None and _is_bf16_of(old, folder):
                reference_session, old = old, None
                _set_voice(reference_session, None)  # the check is on the model's own weights
            else:
                if old is not None:
                    old.close()
                    old = None
                post(p.Progress("precision_check", None))
                try:
                    reference_session = self._open_plain("bf16", None, keep_voice=False)
                except GpuMemoryError:
                    log.info("bf16 does not fit this GPU: int8 without the check")
                    post(_notice(Message("This GPU has no room for the model in bf16, so int8 could not be checked "
                                         "against it on this card; int8 is used without the check.")))
                    return self._open_plain("int8")
                self._between_steps()
            post(p.Progress("precision_check", None))
            try:
                reference = reference_session.record_check_reference()
            except Exception as error:  # noqa: BLE001 - no check, no int8: bf16 stays
                return self._could_not_check(reference_session, error)
            self._between_steps()
            reference_session.close()
            reference_session = None
            try:
                int8 = self._open_plain("int8", None, keep_voice=False)
            except UserFacingError as error:  # int8 did not open (memory, files): the model stays, in bf16
                log.warning("int8 did not open for the check: %s", error.message)
                worker._report(error, "precision")
                return self._open_plain("bf16")
            post(p.Progress("precision_check", None))
            try:
                report = int8.compare_with_check_reference(reference)
            except Exception as error:  # noqa: BLE001
                int8.close()
                return self._could_not_check(self._open_plain("bf16"), error)
            from engine.model.precision_verdicts import store_verdict

            store_verdict(folder, gpu, report.as_dict())
            log.info("int8 check on %s: %s (%s)", gpu, "passed" if report.passed else "failed", report.worst)
            if report.passed:
                _set_voice(int8, self.command.lora)
                return int8
            int8.close()
            worker._report(_refusal(report.as_dict()), "precision")
            return self._open_plain("bf16")
        except CheckStopped:
            if worker._stopping:
                return reference_session  # closed with the engine (None: nothing was open)
            if any(isinstance(waiting, p.Load) for waiting in worker._pending):
                self.requested = "bf16"  # superseded, not refused: the newer Load runs next
            else:
                post(_notice(Message("The int8 check was stopped; standard precision (bf16) stays.")))
            if reference_session is not None:
                return _kept(reference_session, self.command.lora)
            return self._open_plain("bf16")
        except BaseException:
            if reference_session is not None:
                reference_session.close()
            raise

    def _could_not_check(self, bf16_session: Any, error: Exception) -> Any:
        log.warning("the int8 check could not run: %r", error)
        self.worker._report(PrecisionRefused.of(
            "The int8 check could not run ({error}), so standard precision (bf16) stays.", error=error), "precision")
        return _kept(bf16_session, self.command.lora)


def precision_in_use(session: Any, requested: str) -> p.PrecisionInUse:
    """The event after a load: the precision in use and what each precision costs on this device."""
    loaded = getattr(session, "loaded", None)
    precision = getattr(loaded, "precision", None) or "bf16"
    if loaded is None:
        return p.PrecisionInUse(precision, requested)
    try:
        import torch

        from engine.model.memory import free_bytes, model_need, step_bytes

        folder, device = Path(loaded.folder), loaded.device
        free = total = None
        if device.type == "cuda":
            # A switch frees the loaded model first: its memory counts as free for the other precision.
            free = free_bytes(device) + int(torch.cuda.memory_reserved(device))
            total = int(torch.cuda.get_device_properties(device).total_memory)
        context = int(getattr(session, "context_capacity", 4096))
        costs = []
        for option in PRECISIONS:
            need = model_need(folder, context_tokens=context, precision=option).total  # type: ignore[arg-type]
            frame = step_bytes(folder, precision=option).audio_frame  # type: ignore[arg-type]
            costs.append(p.PrecisionCost(option, int(need), int(frame), free is None or need <= free))
        return p.PrecisionInUse(precision, requested, tuple(costs), free, total)
    except Exception:  # noqa: BLE001 - the figures are advice; the load itself worked
        log.warning("the precision costs could not be measured", exc_info=True)
        return p.PrecisionInUse(precision, requested)
