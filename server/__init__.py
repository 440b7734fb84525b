"""voicewire.server: the CLI now; the Starlette app and protocol later."""
