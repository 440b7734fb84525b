#!/usr/bin/env bash
# mypy over the server, the client, the engine's contracts and runtime modules, offline synthesis,
# and the benchmarks but bench/parts.py. The repo's folders are the `voicewire.*` packages only once
# installed (pyproject's package-dir), which an editable install does with an import hook mypy
# cannot follow; a tree of links named as the packages lets mypy see the sources as they are imported.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:-.venv}
tree=.cache/typecheck
mkdir -p "$tree/voicewire"
for part in engine server client integrations bench; do ln -sfn "$PWD/$part" "$tree/voicewire/$part"; done
MYPYPATH="$tree" "$venv/bin/mypy" --config-file pyproject.toml \
  -p voicewire.server -p voicewire.client -p voicewire.integrations \
  -m voicewire.engine -m voicewire.engine.api -m voicewire.engine.runtime.handle -m voicewire.engine.runtime.voices \
  -m voicewire.engine.runtime.backend -m voicewire.engine.runtime.engine -m voicewire.engine.runtime.engine_process \
  -m voicewire.engine.runtime.engine_host -m voicewire.engine.runtime.engine_wire \
  -m voicewire.engine.runtime.stream -m voicewire.engine.runtime.scheduler -m voicewire.engine.vllm.scheduler \
  -m voicewire.engine.runtime.live_streams -m voicewire.engine.kernels.choice -m voicewire.engine.kernels.pdl \
  -m voicewire.engine.runtime.synthesis -m voicewire.bench.model -m voicewire.bench.engine \
  -m voicewire.bench.load -m voicewire.bench.session -m voicewire.bench.level -m voicewire.bench.lookahead \
  -m voicewire.bench.server_http -m voicewire.bench.report -m voicewire.bench.service -m voicewire.bench.machine
