#!/usr/bin/env bash
# mypy over the server, the client and the engine's contracts and runtime modules. The repo's
# folders are the `voicewire.*` packages only once installed (pyproject's package-dir), which an
# editable install does with an import hook mypy cannot follow; a tree of links named as the
# packages lets mypy see the sources as they are imported.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:-.venv}
tree=.cache/typecheck
mkdir -p "$tree/voicewire"
for part in engine server client integrations; do ln -sfn "$PWD/$part" "$tree/voicewire/$part"; done
MYPYPATH="$tree" "$venv/bin/mypy" --config-file pyproject.toml \
  -p voicewire.server -p voicewire.client -p voicewire.integrations \
  -m voicewire.engine -m voicewire.engine.api -m voicewire.engine.handle -m voicewire.engine.voices \
  -m voicewire.engine.backend -m voicewire.engine.engine -m voicewire.engine.engine_process \
  -m voicewire.engine.stream -m voicewire.engine.scheduler -m voicewire.engine.vllm.scheduler \
  -m voicewire.engine.live_streams -m voicewire.engine.kernels -m voicewire.engine.pdl
