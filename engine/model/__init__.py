"""Model files and loading: finding and downloading the model (store), loading it through liquid-audio (loading),
LoRA voices (lora), and the tiny random model in the Hub layout that tests and demo mode load (tiny_checkpoint)."""
