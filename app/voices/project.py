"""A voice in the making: its name, the folder its speech is collected in (paths.voice_data_dir()/<name>) and the
folder the finished voice goes to (paths.voices_dir()/<name>), found again after a restart from the files alone."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from engine import paths
from engine.voices.dataset import VoiceData
from engine.voices.run_files import TrainingLog, checkpoint_path
from engine.voices.voice_card import holds_voice, voice_folder_name


@dataclass(frozen=True)
class VoiceProject:
    name: str
    data_dir: Path
    out_dir: Path

    @classmethod
    def named(cls, name: str) -> VoiceProject:
        folder = voice_folder_name(name.strip())
        return cls(folder, paths.voice_data_dir() / folder, paths.voices_dir() / folder)

    @property
    def data(self) -> VoiceData:
        return VoiceData(self.data_dir)

    def resumable(self) -> bool:
        """A training was stopped (cancelled, failed, or the app closed) and can go on from its checkpoint."""
        return checkpoint_path(self.out_dir).is_file()

    def finished(self) -> bool:
        """The voice folder holds a voice (a finished training, or a voice imported under the same name)."""
        return holds_voice(self.out_dir)

    def log(self) -> TrainingLog | None:
        return TrainingLog.read(self.out_dir)


@dataclass(frozen=True)
class ProjectSummary:
    project: VoiceProject
    clips: int
    seconds: float
    resumable: bool
    finished: bool
    step: int  # of the last training's log (0: none)
    steps: int


def voice_projects() -> list[ProjectSummary]:
    """Every voice whose speech is collected in the app's data folder, by name: what 「続きから」 offers."""
    try:
        folders = sorted((path for path in paths.voice_data_dir().iterdir() if path.is_dir() and not path.name.startswith(".")),
                         key=lambda path: path.name.casefold())
    except OSError:
        return []
    summaries = []
    for folder in folders:
        project = VoiceProject(folder.name, folder, paths.voices_dir() / folder.name)
        clips = project.data.clips()
        log = project.log()
        summaries.append(ProjectSummary(project, len(clips), sum(clip.seconds for clip in clips), project.resumable(),
                                        project.finished(), log.step if log else 0, log.steps if log else 0))
    return summaries
