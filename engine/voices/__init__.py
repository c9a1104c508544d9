"""A voice of the user's own (issue 43): the speech it is trained from and its training.

The data side -- the reading script, the checks of each clip, importing a folder of recordings and the data folder
the trainer reads (reading_script, clip_check, importing, dataset) -- is numpy, soxr and soundfile only: no torch and
no Qt (the window's wizard imports these modules, and the window must not load torch). So are a finished voice's
card and the voices listed (voice_card) and a run's log and files (run_files), which the window reads; they import
torch only inside the functions that need it (exporting and importing a voice, a checkpoint). The training side --
samples, batches, the adapter, the trainer and one run (samples, batches, adapter, trainer, run, plan, preview,
transcribe) -- is torch, and runs in the training process (engine/tools/voice_train.py) or the engine thread.

Empty on purpose: each module is imported by name."""
