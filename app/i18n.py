"""UI language: Japanese by default, English when the system locale is known and not Japanese.

Source strings are English (in the code, via `tr()`); the Japanese lives in
`app/translations/voicechat_ja.ts` and its compiled `voicechat_ja.qm`, both shipped in the package
(pyproject: `app/translations/*.qm`). To update after changing UI strings:

    .venv/bin/pyside6-lupdate app/*.py app/widgets/*.py -ts app/translations/voicechat_ja.ts
    (translate in .venv/bin/pyside6-linguist; tests/test_app_widgets.py fails on any untranslated string,
    tests/test_ui_strings.py on any string of app/ or message of engine/ that the catalogue lacks)
    .venv/bin/pyside6-lrelease app/translations/voicechat_ja.ts -qm app/translations/voicechat_ja.qm

Qt's own Japanese (qtbase_ja, see QT_CATALOGUES) lacks a few texts of Qt 6's file dialog ("&Look in:",
"Files of &type:"); they are in our catalogue, in Qt's context ("QFileDialog"), entered by hand: lupdate
does not see them either, so the same rule applies (tests/test_app_careful_user.py checks the dialog).

Do not pass -no-obsolete: the "CrashReporter" strings of app/crash.py go through a `_tr()` helper that
lupdate cannot see, so lupdate marks them obsolete; they were entered by hand and must stay (mark them
finished again in Linguist).
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QCoreApplication, QLibraryInfo, QLocale, QTranslator

from engine.protocol import TranscriptLabels

TRANSLATIONS_DIR = Path(__file__).resolve().parent / "translations"

# Qt's own catalogues, loaded after ours (packaging/voicechat.spec ships the same list).
QT_CATALOGUES = ("qtbase",)

# Kept alive here: a QTranslator that is garbage-collected silently stops translating.
_installed: list[QTranslator] = []


def choose_language(locale: QLocale | None = None, preference: str = "auto") -> str:
    """'ja' or 'en'. The app is made for Japanese speakers, so an undeterminable locale
    (the C/POSIX locale of a bare container or a service) gets Japanese, not English."""
    if preference in ("ja", "en"):
        return preference
    locale = locale if locale is not None else QLocale.system()
    language = locale.language()
    if language == QLocale.Language.Japanese:
        return "ja"
    if language in (QLocale.Language.C, QLocale.Language.AnyLanguage):
        return "ja"
    return "en"


def install_translator(app: QCoreApplication, language: str) -> str:
    """Install (or remove) the translators for `language`; returns the language in effect."""
    for translator in _installed:
        app.removeTranslator(translator)
    _installed.clear()
    if language != "ja":
        QLocale.setDefault(QLocale(QLocale.Language.English, QLocale.Country.UnitedStates))
        return "en"
    ours = QTranslator(app)
    if not ours.load(str(TRANSLATIONS_DIR / "voicechat_ja.qm")):
        # A broken install should still start, in English, rather than crash on the first tr().
        return "en"
    app.installTranslator(ours)
    _installed.append(ours)
    # Qt's own strings (OK/Cancel in standard dialogs, the file dialog's "Look in:") in Japanese too:
    # shipped next to ours (packaging/voicechat.spec copies them from PySide6), else PySide6's own.
    for catalogue in QT_CATALOGUES:
        qt_translator = QTranslator(app)
        if any(qt_translator.load(f"{catalogue}_ja", str(folder)) for folder in (
                TRANSLATIONS_DIR, QLibraryInfo.path(QLibraryInfo.LibraryPath.TranslationsPath))):
            app.installTranslator(qt_translator)
            _installed.append(qt_translator)
    QLocale.setDefault(QLocale(QLocale.Language.Japanese, QLocale.Country.Japan))
    return "ja"


def transcript_labels() -> TranscriptLabels:
    """The words of an exported transcript (.txt), in the window's language (the engine writes them as given)."""
    return TranscriptLabels(
        user=QCoreApplication.translate("Transcript", "User"),
        assistant=QCoreApplication.translate("Transcript", "Assistant"),
        interrupted=QCoreApplication.translate("Transcript", "(interrupted)"),
        voice=QCoreApplication.translate("Transcript", "(voice, {seconds} s)"),
    )
