"""The window's side of voices (issue 43): the voice menu (the model's own voice, the voices in the app's voices
folder, any adapter folder, a shared voice's zip imported or exported) and the 「声を作る」 wizard (speech recorded
or imported, checked, trained in a process of its own, tried).

`VoiceUi` (ui.py) wires them to the engine: it sends commands through the bridge and takes the voice events; the
main window only places its toolbar button and forwards events. Nothing here loads torch: the data folder, the
voice cards and a run's log are read with engine/voices' torch-free modules, and everything that needs the model
(recording a clip, transcribing it, the plan, the training, checking a shared voice) is a command to the engine."""
