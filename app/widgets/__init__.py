"""Widgets of the main window. Each one is fed plain values from engine events and knows nothing
about queues or the engine thread, so each can be shown and tested alone."""
