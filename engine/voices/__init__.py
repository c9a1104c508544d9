"""A voice of the user's own, the data side: the reading script, the checks of each clip, importing a folder of
recordings and the data folder the trainer reads. numpy, soxr and soundfile only: no torch and no Qt (the
window's wizard imports these modules, and the window must not load torch).

Empty on purpose: each module is imported by name (engine.voices.clip_check, engine.voices.dataset, ...)."""
