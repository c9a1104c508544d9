"""The engine thread's precision flow (engine/worker/precision.py) on the real tiny model (Hub layout), real
ChatSession.open in both precisions and real PortAudio streams (ALSA test devices).

The CPU cannot run the int8 check itself (it needs the GPU engine), so the tests stand in for the GPU's name
and for the check's two halves (ChatSession.record_check_reference / compare_with_check_reference); the flow's
decisions (which session is opened, when, in which precision, what is kept, said and posted) are the real
code's, as are the verdicts file and the sessions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engine import protocol as p
from engine.chat.precision_check import PrecisionReport, StreamAgreement
from engine.chat.session import ChatSession
from engine.errors import GpuMemoryError
from engine.model.precision_verdicts import load_verdict, store_verdict
from engine_helpers import SPEAKER, Engine, audio_env  # noqa: F401 - fixtures
from test_worker import do_turn

pytestmark = [pytest.mark.timeout(240), pytest.mark.filterwarnings("ignore::DeprecationWarning:sounddevice")]

GPU = "Test GPU 8GB"


def _report(passed: bool) -> PrecisionReport:
    good = StreamAgreement(steps=12, top1=1.0, top_k_overlap=1.0, kl_mean=0.004, kl_max=0.01)
    bad = StreamAgreement(steps=12, top1=0.5, top_k_overlap=0.6, kl_mean=0.42, kl_max=0.9)
    streams = {"text": good, "codebook_0": good if passed else bad, "codebook_1": good}
    return PrecisionReport(streams=streams, passed=passed)


class Check:
    """The check's two halves, recorded: which session each ran on and in which precision."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, passed: bool, during_record: Any = None,
                 report: PrecisionReport | None = None) -> None:
        self.recorded: list[tuple[str, int]] = []
        self.compared: list[tuple[str, int]] = []
        self.passed = passed
        self.report = report  # what the comparison says, when not `_report(passed)`
        self.during_record = during_record
        check = self

        def record(session: ChatSession) -> object:
            check.recorded.append((session.loaded.precision, id(session)))
            if check.during_record is not None:
                check.during_record()
            return "reference"

        def compare(session: ChatSession, reference: object) -> PrecisionReport:
            assert reference == "reference"
            check.compared.append((session.loaded.precision, id(session)))
            return check.report or _report(check.passed)

        monkeypatch.setattr(ChatSession, "record_check_reference", record)
        monkeypatch.setattr(ChatSession, "compare_with_check_reference", compare)
        monkeypatch.setattr("engine.worker.precision.gpu_name", lambda: GPU)


@pytest.fixture
def model(tiny_model_dir: Path, isolated_user_dirs: Path) -> Path:
    return tiny_model_dir


def _load(eng: Engine, model: Path, precision: str, **kwargs: Any) -> int:
    start = len(eng.seen)
    eng.send(p.Load(source=str(model), precision=precision, **kwargs))
    eng.wait_for(lambda e: isinstance(e, p.PrecisionInUse), after=start, timeout=120)
    eng.wait_state(p.EngineState.IDLE, after=start, timeout=120)
    return start


def _opened(eng: Engine, start: int) -> int:
    """Sessions opened since `start` (each ChatSession.open reports its weights' loading once)."""
    return sum(1 for e in eng.of(p.Progress, start) if e.stage == "load_weights")


def _engine() -> Engine:
    eng = Engine()
    eng.send(p.SelectDevices(None, SPEAKER), p.ApplySettings(p.SamplingSettings(), "Respond with interleaved text and audio.", 1.0))
    return eng


def test_a_missing_verdict_runs_the_check_keeps_it_and_loads_int8(audio_env, model: Path, monkeypatch) -> None:  # noqa: ANN001
    check = Check(monkeypatch, passed=True)
    eng = _engine()
    try:
        start = _load(eng, model, "int8")
        # A bf16 session for the reference (nothing was loaded), then int8 for the comparison: two opens.
        assert [r[0] for r in check.recorded] == ["bf16"] and [c[0] for c in check.compared] == ["int8"]
        assert _opened(eng, start) == 2
        assert any(e.stage == "precision_check" for e in eng.of(p.Progress, start))
        assert eng.worker.session.loaded.precision == "int8" and id(eng.worker.session) == check.compared[0][1]
        used = eng.of(p.PrecisionInUse, start)[-1]
        assert (used.precision, used.requested) == ("int8", "int8")
        # The costs per precision, from the engine (CPU: no free memory figure, everything fits).
        costs = {c.precision: c for c in used.costs}
        assert set(costs) == {"bf16", "int8"} and used.free_bytes is None and used.total_bytes is None
        assert costs["int8"].frame_bytes < costs["bf16"].frame_bytes and costs["int8"].need_bytes < costs["bf16"].need_bytes
        assert eng.errors(start) == []
        verdict = load_verdict(model, GPU)
        assert verdict is not None and verdict["passed"] is True

        # The next int8 load finds the verdict: no check, one open.
        start = _load(eng, model, "int8")
        assert len(check.recorded) == 1 and len(check.compared) == 1 and _opened(eng, start) == 1
        assert not any(e.stage == "precision_check" for e in eng.of(p.Progress, start))
        _, metrics = do_turn(eng, hold_s=0.3)
        assert metrics.frames > 0 and eng.errors(start) == []
    finally:
        eng.stop()


def test_a_failed_check_reverts_to_bf16_with_the_figures_and_the_model_stays_usable(audio_env, model: Path, monkeypatch) -> None:  # noqa: ANN001
    check = Check(monkeypatch, passed=False)
    eng = _engine()
    try:
        start = _load(eng, model, "bf16")
        bf16_session = eng.worker.session
        start = _load(eng, model, "int8")
        # The loaded bf16 session of the same model is the reference: no bf16 open for it.
        assert check.recorded == [("bf16", id(bf16_session))]
        assert [c[0] for c in check.compared] == ["int8"]
        assert _opened(eng, start) == 2  # int8 for the comparison, bf16 again after it failed
        error = [e for e in eng.errors(start) if e.kind == "precision"]
        assert len(error) == 1 and "codebook_0: KL 0.420, top-1 50%" in error[0].message
        assert "bf16" in error[0].message and error[0].template  # translatable
        used = eng.of(p.PrecisionInUse, start)[-1]
        assert (used.precision, used.requested) == ("bf16", "int8")
        assert eng.worker.session.loaded.precision == "bf16"
        assert load_verdict(model, GPU)["passed"] is False
        _, metrics = do_turn(eng, hold_s=0.3)
        assert metrics.frames > 0

        # The kept failing verdict: refused at once, without a check, with the same figures.
        start = _load(eng, model, "int8")
        assert len(check.recorded) == 1 and _opened(eng, start) == 1
        error = [e for e in eng.errors(start) if e.kind == "precision"]
        assert len(error) == 1 and "codebook_0: KL 0.420" in error[0].message
        assert eng.of(p.PrecisionInUse, start)[-1].precision == "bf16"
    finally:
        eng.stop()


def test_a_stored_passing_verdict_skips_the_check(audio_env, model: Path, monkeypatch) -> None:  # noqa: ANN001
    check = Check(monkeypatch, passed=False)  # would fail: it must not run
    store_verdict(model, GPU, _report(True).as_dict())
    eng = _engine()
    try:
        start = _load(eng, model, "int8")
        assert check.recorded == [] and check.compared == [] and _opened(eng, start) == 1
        assert eng.worker.session.loaded.precision == "int8" and eng.errors(start) == []
        # Another GPU has no verdict: the check runs there.
        monkeypatch.setattr("engine.worker.precision.gpu_name", lambda: "Another GPU")
        start = _load(eng, model, "int8")
        assert len(check.compared) == 1 and eng.worker.session.loaded.precision == "bf16"
    finally:
        eng.stop()


def test_a_verdict_kept_before_the_decoders_were_compared_is_checked_again_once(audio_env, model: Path, monkeypatch) -> None:  # noqa: ANN001
    check = Check(monkeypatch, passed=True)
    old = _report(True).as_dict()
    old.pop("decoder", None)  # as a verdict kept before the check compared the audio decoders
    store_verdict(model, GPU, old)
    eng = _engine()
    try:
        start = _load(eng, model, "int8")
        assert len(check.compared) == 1 and eng.worker.session.loaded.precision == "int8" and eng.errors(start) == []
        assert "decoder" in load_verdict(model, GPU)
        start = _load(eng, model, "int8")  # the new verdict is kept: no second check
        assert len(check.compared) == 1 and _opened(eng, start) == 1
    finally:
        eng.stop()


def test_a_check_failed_by_the_audio_decoder_says_so_and_keeps_bf16(audio_env, model: Path, monkeypatch) -> None:  # noqa: ANN001
    from engine.chat.precision_check import DecoderAgreement

    report = _report(True)
    report.decoder, report.passed = DecoderAgreement(frames=18, snr_db=12.34), False
    Check(monkeypatch, passed=False, report=report)
    eng = _engine()
    try:
        for checked in (True, False):  # the check, then its kept verdict: the same refusal
            start = _load(eng, model, "int8")
            error = [e for e in eng.errors(start) if e.kind == "precision"]
            assert len(error) == 1 and "audio decoder" in error[0].template, checked
            assert "SNR 12.3 dB over 18 frames; allowed: from 20 dB" in error[0].message
            assert eng.worker.session.loaded.precision == "bf16"
    finally:
        eng.stop()


def test_commands_during_the_check_are_handled_as_during_a_load(audio_env, model: Path, monkeypatch) -> None:  # noqa: ANN001
    eng = _engine()
    # While the reference is recorded: a press (refused, no model yet), a Ping (answered) and a new Load (bf16,
    # the user changed their mind): the check stops before int8 opens, nothing is kept, bf16 stays and the new
    # Load runs after.
    check = Check(monkeypatch, passed=True, during_record=lambda: eng.send(
        p.StartTake(), p.Ping(7), p.Load(source=str(model), precision="bf16", context_tokens=2048)))
    try:
        start = len(eng.seen)
        eng.send(p.Load(source=str(model), precision="int8"))
        # The second load (2048 tokens) ends with its context figure, then IDLE.
        usage = eng.wait_for(lambda e: isinstance(e, p.ContextUsage) and e.capacity_tokens == 2048, after=start,
                             timeout=120)
        eng.wait_state(p.EngineState.IDLE, after=eng.seen.index(usage))
        assert len(check.recorded) == 1 and check.compared == []
        assert load_verdict(model, GPU) is None
        pong = eng.of(p.Pong, start)
        assert pong and pong[0].seq == 7 and pong[0].state is p.EngineState.LOADING
        assert any(e.kind == "take" for e in eng.errors(start))
        # Superseded, not refused: no notice, and nothing for the window to set back (the new Load is the choice).
        assert eng.of(p.EngineNotice, start) == []
        used = eng.of(p.PrecisionInUse, start)
        assert [(u.precision, u.requested) for u in used] == [("bf16", "bf16"), ("bf16", "bf16")]
        assert eng.worker.session.loaded.precision == "bf16" and eng.worker.session.context_capacity == 2048
        _, metrics = do_turn(eng, hold_s=0.3)
        assert metrics.frames > 0

        # A Cancel during the check: the same, without a new Load.
        check.during_record = lambda: eng.send(p.Cancel())
        start = _load(eng, model, "int8")
        assert len(check.recorded) == 2 and check.compared == []
        assert eng.worker.session.loaded.precision == "bf16"
        notices = eng.of(p.EngineNotice, start)
        assert len(notices) == 1 and "stopped" in notices[0].message and notices[0].template
        assert load_verdict(model, GPU) is None
        used = eng.of(p.PrecisionInUse, start)[-1]
        assert (used.precision, used.requested) == ("bf16", "int8")  # the window sets its choice back
    finally:
        eng.stop()


def test_a_card_too_small_for_bf16_gets_int8_unchecked_and_is_told(audio_env, model: Path, monkeypatch) -> None:  # noqa: ANN001
    check = Check(monkeypatch, passed=True)

    def opener(source: Any, **kwargs: Any) -> ChatSession:
        if kwargs["precision"] == "bf16":
            raise GpuMemoryError.of("The GPU ran out of memory during the prefill; try a shorter context.")
        return ChatSession.open(source, **kwargs)

    eng = Engine(session_opener=opener)
    try:
        start = _load(eng, model, "int8")
        assert check.recorded == [] and eng.worker.session.loaded.precision == "int8"
        notice = eng.of(p.EngineNotice, start)
        assert len(notice) == 1 and "without the check" in notice[0].message
        assert load_verdict(model, GPU) is None  # it runs where bf16 fits
        assert eng.errors(start) == []
    finally:
        eng.stop()


def test_int8_is_refused_without_an_nvidia_gpu(audio_env, model: Path) -> None:  # noqa: ANN001
    eng = _engine()
    try:
        start = _load(eng, model, "int8")
        error = [e for e in eng.errors(start) if e.kind == "precision"]
        assert len(error) == 1 and "NVIDIA GPU" in error[0].message
        assert eng.worker.session.loaded.precision == "bf16"
        used = eng.of(p.PrecisionInUse, start)[-1]
        assert (used.precision, used.requested) == ("bf16", "int8")
    finally:
        eng.stop()


def test_an_int8_that_does_not_open_for_the_check_leaves_the_model_in_bf16(audio_env, model: Path, monkeypatch) -> None:  # noqa: ANN001
    """The bf16 reference was recorded and closed, then int8 fails to open (here: no room on the card): the user
    is told why and gets the model back in bf16, usable, with no verdict kept."""
    check = Check(monkeypatch, passed=True)
    real_open = ChatSession.open

    def open_refusing_int8(*args: Any, **kwargs: Any) -> ChatSession:
        if kwargs.get("precision") == "int8":
            raise GpuMemoryError.of("The GPU ran out of memory while loading the model ({memory}). "
                                    "Close other programs that use the GPU, or use a GPU with more memory.", memory="test")
        return real_open(*args, **kwargs)

    monkeypatch.setattr(ChatSession, "open", open_refusing_int8)
    eng = _engine()
    try:
        start = _load(eng, model, "int8")
        assert [r[0] for r in check.recorded] == ["bf16"] and check.compared == []
        assert eng.worker.session is not None and eng.worker.session.loaded.precision == "bf16"
        assert [e.kind for e in eng.errors(start)] == ["precision"] and "memory" in eng.errors(start)[0].message
        assert (eng.of(p.PrecisionInUse, start)[-1].precision, load_verdict(model, GPU)) == ("bf16", None)
        _, metrics = do_turn(eng, hold_s=0.3)
        assert metrics.frames > 0
    finally:
        eng.stop()
