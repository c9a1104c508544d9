"""The 精度 choice in the window (real Qt widgets, offscreen, on a scripted engine): the settings dialog's two
options with what each costs on this card (the engine's PrecisionInUse figures), the recommendation under 8 GB,
the change applied by a new Load without a restart, and int8 refused by the engine set back to bf16."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from PySide6.QtWidgets import QApplication

from app_helpers import ScriptedWorker, clipped_texts, commands_of, english_texts, make_window, scripted_window
from app.widgets.precision import recommends_int8
from engine import protocol as p
from engine.settings import Settings, load_settings

GB = 1e9


def _status(total: float, free: float, *, precision: str = "bf16", requested: str | None = None,
            bf16_need: float = 4.45, int8_need: float = 2.85) -> p.PrecisionInUse:
    costs = (p.PrecisionCost("bf16", int(bf16_need * GB), int(3.22 * GB), bf16_need <= free),
             p.PrecisionCost("int8", int(int8_need * GB), int(1.67 * GB), int8_need <= free))
    return p.PrecisionInUse(precision, requested or precision, costs, int(free * GB), int(total * GB))


@pytest.fixture
def window(qtbot, tmp_path: Path):  # noqa: ANN001, ANN201
    yield from scripted_window(qtbot, tmp_path)


def _worker() -> ScriptedWorker:
    return ScriptedWorker.instances[-1]


def _loaded(qtbot, win, status: p.PrecisionInUse) -> None:  # noqa: ANN001
    _worker().post(p.Devices(("USB Mic",), ("Speakers",)), p.StateChanged(p.EngineState.LOADING),
                   p.EngineInfo("NVIDIA GeForce RTX 3060", None, True, None, "LFM", None, 4096), status,
                   p.StateChanged(p.EngineState.IDLE))
    qtbot.waitUntil(lambda: win.state is p.EngineState.IDLE and win.precision_status is not None)


def test_the_dialog_shows_both_options_with_their_costs_and_recommends_int8_under_8_gb(qtbot, window) -> None:  # noqa: ANN001
    _loaded(qtbot, window, _status(total=6.4, free=5.6))
    # An answer measured with bf16: int8's expected RTF is that RTF scaled by the bytes per frame.
    _worker().post(p.TurnMetrics(2, 40.0, 90.0, 120.0, 180.0, 300.0, 0.216, 10, "x", False))
    qtbot.waitUntil(lambda: window.measured_rtf is not None)
    dialog = window.open_settings()
    box = dialog.precision
    assert box.bf16.isChecked() and box.chosen() == "bf16"
    assert box.bf16.text() == "標準 (bf16)"
    assert box.int8.text() == "省メモリ・高速 (int8)（推奨）"
    assert box.bf16_cost.text() == "メモリー: 必要 4.5 GB / 空き 5.6 GB · 1 フレームの読み出し 3.22 GB · RTF 0.22（実測）"
    assert box.int8_cost.text() == ("メモリー: 必要 2.9 GB / 空き 5.6 GB · 1 フレームの読み出し 1.67 GB (bf16 の 52%) · "
                                    "RTF 約 0.11（推定）")
    assert "推奨" in box.note.text()
    dialog.reject()

    # A 12 GB card: no recommendation; without a measured answer, no RTF.
    _worker().post(_status(total=12.9, free=11.2))
    qtbot.waitUntil(lambda: window.precision_status.total_bytes == int(12.9 * GB))
    window.measured_rtf = None
    dialog = window.open_settings()
    assert dialog.precision.int8.text() == "省メモリ・高速 (int8)"
    assert "推奨" not in dialog.precision.note.text() and "RTF" not in dialog.precision.int8_cost.text()
    dialog.reject()


def test_the_recommendation_follows_the_card() -> None:
    assert recommends_int8(_status(total=4.0, free=3.5))
    assert recommends_int8(_status(total=6.4, free=6.0))
    assert not recommends_int8(_status(total=8.59, free=7.9))  # an "8 GB" card (8 GiB) is not under 8 GB
    assert recommends_int8(_status(total=8.59, free=3.5))  # bf16 does not fit what is free, int8 does
    assert not recommends_int8(_status(total=24.0, free=20.0))
    assert not recommends_int8(None)
    assert not recommends_int8(p.PrecisionInUse("bf16", "bf16"))  # the CPU


def test_a_card_where_bf16_does_not_fit_says_so_and_the_cpu_offers_no_int8(qtbot, window) -> None:  # noqa: ANN001
    _loaded(qtbot, window, _status(total=8.59, free=3.5, precision="int8"))
    dialog = window.open_settings()
    box = dialog.precision
    assert box.bf16_cost.text().startswith("このカードには入りません: 必要 4.5 GB / 空き 3.5 GB")
    assert "c62828" in box.bf16_cost.styleSheet() and box.int8.text().endswith("（推奨）")
    dialog.reject()
    cpu = p.PrecisionInUse("bf16", "bf16", (p.PrecisionCost("bf16", int(1.3 * GB), 12_000_000, True),
                                             p.PrecisionCost("int8", int(1.3 * GB), 6_000_000, True)))
    _worker().post(cpu)
    qtbot.waitUntil(lambda: window.precision_status is cpu)
    dialog = window.open_settings()
    assert not dialog.precision.int8.isEnabled() and dialog.precision.int8_cost.text() == "NVIDIA の GPU が必要です。"
    dialog.reject()


def test_before_any_load_the_dialog_says_when_the_costs_come(qtbot, window) -> None:  # noqa: ANN001
    dialog = window.open_settings()
    box = dialog.precision
    assert box.bf16_cost.isHidden() and box.int8_cost.isHidden() and box.int8.isEnabled()
    assert "モデルを読み込むと表示されます" in box.note.text()
    dialog.reject()


def test_changing_the_precision_reloads_without_a_restart_and_is_remembered(qtbot, window, tmp_path: Path) -> None:  # noqa: ANN001
    _loaded(qtbot, window, _status(total=6.4, free=5.6))
    before = len(commands_of(window, p.Load))
    dialog = window.open_settings()
    dialog.precision.int8.setChecked(True)
    dialog.accept()
    qtbot.waitUntil(lambda: len(commands_of(window, p.Load)) == before + 1)
    load = commands_of(window, p.Load)[-1]
    assert load.precision == "int8" and load.source == "/models/lfm" and not load.allow_download
    assert load_settings(tmp_path / "settings.json").settings.precision == "int8"
    # The load's progress is shown as for any load, the check's step named.
    _worker().post(p.StateChanged(p.EngineState.LOADING), p.Progress("precision_check", None))
    qtbot.waitUntil(lambda: "int8 を bf16 と比べて確認中" in window.status_bar.progress_label.text())
    _worker().post(p.EngineInfo("NVIDIA GeForce RTX 3060", None, True, None, "LFM", None, 4096),
                   _status(total=6.4, free=5.6, precision="int8"), p.StateChanged(p.EngineState.IDLE))
    qtbot.waitUntil(lambda: window.state is p.EngineState.IDLE and window.precision_status.precision == "int8")
    assert window.settings.precision == "int8" and window.status_bar.model_label.text().endswith(" · int8")
    # Other settings changes do not reload.
    window.apply_settings(dataclasses.replace(window.settings, max_answer_seconds=12.0))
    assert len(commands_of(window, p.Load)) == before + 1


def test_int8_refused_by_the_engine_sets_the_setting_back_and_says_why(qtbot, tmp_path: Path) -> None:  # noqa: ANN001
    for win in scripted_window(qtbot, tmp_path, settings=Settings(model_source="/models/lfm", precision="int8")):
        assert commands_of(win, p.Load)[-1].precision == "int8"  # the start-up load asks for the saved choice
        from engine.worker.precision import _refused

        refusal = _refused("codebook_3: KL 0.420, top-1 50%", {"max_kl": 0.1, "text_top1": 0.8})
        _worker().post(p.StateChanged(p.EngineState.LOADING), p.EngineError.from_exception("precision", refusal))
        _loaded(qtbot, win, _status(total=6.4, free=5.6, precision="bf16", requested="int8"))
        assert win.settings.precision == "bf16"
        assert load_settings(tmp_path / "settings.json").settings.precision == "bf16"
        assert win.status_bar.model_label.text().endswith(" · bf16")
        text = win.banner.text
        assert "精度" in text and "codebook_3: KL 0.420, top-1 50%" in text and "標準 (bf16) のまま" in text
        dialog = win.open_settings()
        assert dialog.precision.bf16.isChecked()
        dialog.reject()
        # A notice (the check could not run on this card) is information, not an error.
        from engine.errors import Message
        from engine.worker.precision import _notice

        _worker().post(_notice(Message("This GPU has no room for the model in bf16, so int8 could not be checked "
                                       "against it on this card; int8 is used without the check.")))
        qtbot.waitUntil(lambda: "確認なしで int8 を使います" in win.banner.text)
        assert win.banner.level == "info"


@pytest.mark.parametrize("language", ["ja", "en"])
def test_the_model_tab_with_every_cost_line_fits_800_by_600(qtbot, tmp_path: Path, language: str) -> None:  # noqa: ANN001
    from PySide6.QtGui import QFontDatabase

    if not QFontDatabase.families(QFontDatabase.WritingSystem.Japanese):
        pytest.skip("no Japanese font")
    ScriptedWorker.instances.clear()
    win = make_window(tmp_path, settings=Settings(model_source="/models/lfm", lora="/home/user/voices/alice-voice"),
                      language=language)
    qtbot.addWidget(win)
    win.show()
    win.start_engine()
    win.resize(800, 600)
    qtbot.waitUntil(lambda: len(_worker().received) >= 4)
    _loaded(qtbot, win, _status(total=6.4, free=3.5))  # the longest texts: recommended, bf16 does not fit
    win.measured_rtf = 0.216
    dialog = win.open_settings()
    dialog.tabs.setCurrentWidget(dialog.precision)
    dialog.precision.set_status(win.precision_status, win.measured_rtf)
    qtbot.wait(60)
    QApplication.processEvents()
    assert dialog.height() <= 600 and dialog.width() <= 800
    assert clipped_texts(dialog) == []
    if language == "ja":
        assert english_texts(dialog, names=("alice-voice",)) == []
    dialog.reject()
    win.close()
