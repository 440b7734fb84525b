// voicewire's browser player: protocol v1 over the msgpack subprotocol, Opus decoded with
// WebCodecs (or PCM from the server where WebCodecs has no Opus), played through an AudioWorklet
// jitter buffer. No dependencies; see docs/player.md.
//
//   const player = new VoicewirePlayer();
//   await player.connect('ws://127.0.0.1:8000', { token });
//   await player.start({ speaker: 'vivian' });
//   player.push('Hello there, ');   // as your LLM writes
//   player.end();
//   player.cancel();                // barge-in: silent within one render quantum
//
// Events (CustomEvent, details in `event.detail`): ready, audio, progress, words (with
// start(voice, { timestamps: 'words' })), underrun, done, cancelled (its heard_text: what the
// listener heard, from the playback this player reports), error.
import { decode, encode } from './msgpack.js';

const RATE = 48000;
const SUBPROTOCOL = 'voicewire.v1.msgpack';

/** Whether this browser's WebCodecs can decode Opus. */
export async function opusSupported() {
  if (typeof AudioDecoder === 'undefined') return false;
  try {
    const { supported } = await AudioDecoder.isConfigSupported({ codec: 'opus', sampleRate: RATE, numberOfChannels: 1 });
    return supported;
  } catch {
    return false;
  }
}

export class VoicewirePlayer extends EventTarget {
  constructor({ targetMs = 90, maxTargetMs = 1000 } = {}) {
    super();
    this.targetMs = targetMs;
    this.maxTargetMs = maxTargetMs;
    this.turns = 0;
    this.context = null; // the current context id
    this.cancelled = new Set();
    this.latencies = [];
    this.bytes = 0;
    this.connectedAt = 0;
    this.worklet = { played: 0, level: 0, underruns: 0 };
    // Text ({ text, contextId }, and null for end) for the turn after the ended one, or after the
    // done one whose decoder is still handing over its last samples (`flushing`).
    this.next = [];
    this.flushing = false;
  }

  /** Open the socket (`url` is ws[s]://host[:port]) and the audio graph. `format`: 'auto', 'opus' or 'pcm'. */
  async connect(url, { token = null, format = 'auto' } = {}) {
    this.audio = new AudioContext({ sampleRate: RATE, latencyHint: 'interactive' });
    await this.audio.audioWorklet.addModule(new URL('./player-worklet.js', import.meta.url));
    this.node = new AudioWorkletNode(this.audio, 'voicewire-player', {
      outputChannelCount: [1],
      processorOptions: { targetMs: this.targetMs, maxTargetMs: this.maxTargetMs },
    });
    this.node.connect(this.audio.destination);
    this.node.port.onmessage = ({ data }) => this.onWorklet(data);
    this.opus = format === 'opus' || (format === 'auto' && (await opusSupported()));
    const protocols = token ? [SUBPROTOCOL, `voicewire.token.${token}`] : [SUBPROTOCOL];
    this.ws = new WebSocket(`${url.replace(/\/$/, '')}/v1/stream`, protocols);
    this.ws.binaryType = 'arraybuffer';
    this.ws.onmessage = ({ data }) => this.onMessage(decode(new Uint8Array(data)));
    this.ws.onclose = (event) => this.emit('close', { code: event.code, reason: event.reason });
    await new Promise((resolve, reject) => {
      this.ws.onopen = resolve;
      this.ws.onerror = () => reject(new Error(`could not connect to ${url}`));
    });
    this.connectedAt = performance.now();
    this.playbackTimer = setInterval(() => this.reportPlayback(), 250);
  }

  /** Configure the session (voice: {speaker, language, instruct}); resolves with `ready`. */
  start(voice = {}, { sampling, buffering, maxFrames, bitrate, timestamps } = {}) {
    const format = this.opus ? { encoding: 'opus', sample_rate: RATE, bitrate } : { encoding: 'pcm_f32le', sample_rate: RATE };
    const message = { type: 'start', voice, format, sampling, buffering, max_frames: maxFrames, timestamps };
    return new Promise((resolve, reject) => {
      this.pending = { resolve, reject };
      this.send(message);
    });
  }

  /** Send text to the current turn (a new one when none is open). Text after `end()` belongs to
   * the next turn: it is held until the ended one is done (and its decoder flushed), then sent as
   * a new turn. */
  push(text, { contextId } = {}) {
    // A new turn resets the Opus decoder, which would drop the done turn's last packets.
    if (this.flushing) { this.next.push({ text, contextId }); return; }
    if (contextId && contextId !== this.context) this.openTurn(contextId);
    if (this.context && this.turnState.ended) { this.next.push({ text }); return; }
    if (!this.context) this.openTurn(`turn-${++this.turns}`);
    const turn = this.turnState;
    if (turn.firstPush === null) turn.firstPush = performance.now();
    this.send({ type: 'text', context_id: this.context, text });
  }

  flush() { if (this.context) this.send({ type: 'flush', context_id: this.context }); }

  end() {
    if (this.flushing || (this.context && this.turnState.ended)) { // ends the held next turn, once it is open
      if (this.next.length) this.next.push(null);
      return;
    }
    if (!this.context) return;
    this.send({ type: 'end', context_id: this.context });
    this.turnState.ended = true;
  }

  /** Barge-in: silence now, drop what is still on its way, tell the server. */
  cancel() {
    // A turn already done whose audio still plays is cut too (a late barge-in); either way the
    // server hears how far playback got, for its heard_text.
    const late = !this.context && this.worklet.context && this.worklet.level > 0 ? this.worklet.context : null;
    this.reportPlayback(this.context || late);
    this.next = [];
    this.node?.port.postMessage({ type: 'clear' });
    if (late && !this.cancelled.has(late)) {
      this.cancelled.add(late);
      this.send({ type: 'cancel', context_id: late });
    }
    if (!this.context) return;
    this.cancelled.add(this.context);
    this.send({ type: 'cancel', context_id: this.context });
    this.context = null;
  }

  close() {
    clearInterval(this.playbackTimer);
    this.ws?.close();
    this.decoder?.close?.();
    return this.audio?.close();
  }

  stats() {
    const seconds = Math.max((performance.now() - this.connectedAt) / 1000, 1e-3);
    return {
      played: this.worklet.played,
      bufferMs: (this.worklet.level / RATE) * 1000,
      startDelayMs: ((this.worklet.startDelay ?? 0) / RATE) * 1000, // learned from the last turn's pace
      underruns: this.worklet.underruns,
      latencyMs: this.latencies.at(-1) ?? null,
      latenciesMs: [...this.latencies],
      bitrateKbps: (this.bytes * 8) / 1000 / seconds,
      codec: this.opus ? 'opus' : 'pcm',
      rate: RATE, // of the session's audio: pts, samples and played count in it
      context: this.context,
    };
  }

  /** Copy rendered audio back to the main thread ('rendered' events), for tests and meters. */
  tap(on = true) { this.node.port.postMessage({ type: 'tap', on }); }

  // --- internals ---------------------------------------------------------------------------

  send(message) { this.ws.send(encode(message)); }

  emit(type, detail) { this.dispatchEvent(new CustomEvent(type, { detail })); }

  /** The text held for the turn after an ended one, sent as a new turn. */
  sendNext() {
    const next = this.next;
    this.next = [];
    for (const held of next) { if (held === null) this.end(); else this.push(held.text, { contextId: held.contextId }); }
  }

  openTurn(id) {
    // A turn that ended normally plays out; one replaced mid-way is silenced.
    const replaced = this.context !== null && this.context !== id;
    this.context = id;
    this.turnState = {
      id, firstPush: null, skip: this.codecDelay || 0, owed: 0, heard: false, ended: false,
      underrunBase: this.worklet.underruns, // the server counts underruns per context
    };
    if (replaced) this.node.port.postMessage({ type: 'clear' });
    if (this.opus) this.resetDecoder();
  }

  resetDecoder() {
    if (!this.decoder || this.decoder.state === 'closed') {
      this.decoder = new AudioDecoder({
        output: (data) => this.onDecoded(data),
        error: (error) => this.emit('error', { code: 'decode_failed', message: String(error) }),
      });
    } else {
      this.decoder.reset();
    }
    this.decoder.configure({ codec: 'opus', sampleRate: RATE, numberOfChannels: 1 });
    this.decodeTurn = this.context;
  }

  onMessage(message) {
    const context = message.context_id;
    if (context && this.cancelled.has(context) && message.type !== 'cancelled') return; // late audio
    switch (message.type) {
      case 'ready':
        this.codecDelay = message.codec_delay;
        this.pending?.resolve(message);
        this.emit('ready', message);
        break;
      case 'audio':
        if (context !== this.context) return;
        this.bytes += message.data.length;
        this.turnState.owed += message.samples;
        if (this.opus) {
          this.decoder.decode(new EncodedAudioChunk({ type: 'key', timestamp: (message.pts * 1e6) / RATE, data: message.data }));
        } else {
          const samples = new Float32Array(message.data.buffer.slice(message.data.byteOffset, message.data.byteOffset + message.data.byteLength));
          this.play(samples);
        }
        this.emit('audio', message);
        break;
      case 'progress':
        this.emit('progress', message);
        break;
      case 'words': // with start({ timestamps: 'words' })
        this.emit('words', message);
        break;
      case 'done':
        if (context === this.context) {
          this.context = null;
          // Let the decoder hand over its last samples, then let the buffer play out. A failed
          // flush (the decoder closed) ends the turn all the same: held text must not wait forever.
          this.flushing = true;
          const flushed = this.opus ? this.decoder.flush() : Promise.resolve();
          const finish = () => {
            this.flushing = false;
            this.node.port.postMessage({ type: 'finish' });
            this.sendNext(); // after the flush: a new turn resets the decoder
          };
          flushed.then(finish, finish);
        }
        this.emit('done', message);
        break;
      case 'cancelled':
        this.emit('cancelled', message);
        break;
      case 'error':
        if (this.pending && !this.ready) this.pending.reject(new Error(`${message.code}: ${message.message}`));
        this.emit('error', message);
        break;
      default:
        break;
    }
    if (message.type === 'ready') this.ready = true;
  }

  onDecoded(data) {
    const turn = this.turnState;
    if (!turn || this.decodeTurn !== turn.id || this.cancelled.has(turn.id)) { data.close(); return; }
    let samples = new Float32Array(data.numberOfFrames);
    data.copyTo(samples, { planeIndex: 0, format: 'f32-planar' });
    data.close();
    if (turn.skip) { // the encoder's pre-skip
      const cut = Math.min(turn.skip, samples.length);
      samples = samples.subarray(cut);
      turn.skip -= cut;
    }
    this.play(samples);
  }

  play(samples) {
    const turn = this.turnState;
    const n = Math.min(samples.length, turn.owed); // the padding of a last packet is not audio
    turn.owed -= n;
    if (n) this.node.port.postMessage({ type: 'push', samples: samples.slice(0, n), context: turn.id });
  }

  onWorklet(data) {
    if (data.type === 'rendered') { this.emit('rendered', data.samples); return; }
    const before = this.worklet.underruns;
    this.worklet = data;
    if (data.underruns > before) this.emit('underrun', { underruns: data.underruns });
    const turn = this.turnState;
    if (turn && !turn.heard && data.firstFrame !== null && data.context === turn.id && turn.firstPush !== null) {
      turn.heard = true;
      // The first sample's render time, moved from the audio clock to performance.now().
      const stamp = this.audio.getOutputTimestamp();
      const at = stamp.performanceTime + (data.firstFrame / RATE - stamp.contextTime) * 1000;
      this.latencies.push(at - turn.firstPush);
    }
  }

  reportPlayback(context = this.context) {
    if (!context || this.ws.readyState !== WebSocket.OPEN || !this.ready) return;
    if (this.worklet.context !== context) return; // nothing of this turn played yet
    this.send({
      type: 'playback',
      context_id: context,
      played_samples: this.worklet.contextPlayed,
      underruns: this.worklet.underruns - this.turnState.underrunBase,
    });
  }
}
