// The voice library from the browser: list, clone and delete voices over /v1/voices
// (docs/protocol.md, "Voice library"), and a microphone recording made into a WAV file to clone.
// No dependencies.

const RATE = 24000; // recordings are made at the model's rate (the server resamples others)

/** The HTTP API with the page's browser token, as the socket carries it (with API keys every
 * /v1/* call needs one). Failures throw the server's message, in words. */
export class VoiceLibrary {
  constructor({ token = null } = {}) { this.token = token; }

  /** { variant, voices (named speakers), stored (cloned voices), languages, cloning }. */
  list() { return this.call('v1/voices'); }

  /** Clone `file` (a File or Blob; WAV, FLAC or OGG) as `name`; with `refText`, in context too.
   * Resolves with { id, name, duration, in_context }. */
  clone(file, { name, refText = '', filename = file.name || 'reference.wav' }) {
    const form = new FormData();
    form.append('file', file, filename);
    form.append('name', name);
    if (refText) form.append('ref_text', refText);
    return this.call('v1/voices', { method: 'POST', body: form });
  }

  remove(id) { return this.call(`v1/voices/${encodeURIComponent(id)}`, { method: 'DELETE' }); }

  async call(path, init = {}) {
    const headers = this.token ? { Authorization: `Bearer ${this.token}` } : {};
    const response = await fetch(path, { ...init, headers });
    const body = await response.json().catch(() => null);
    if (!response.ok) throw new Error(body?.error?.message || `${response.status} ${response.statusText}`);
    return body;
  }
}

/** One take from the microphone: `start()`, then `stop()` resolves with { file (WAV), seconds }. */
export class Recorder {
  async start() {
    this.stream = await navigator.mediaDevices.getUserMedia({ audio: true });
    this.chunks = [];
    this.recorder = new MediaRecorder(this.stream);
    this.recorder.ondataavailable = ({ data }) => { if (data.size) this.chunks.push(data); };
    this.stopped = new Promise((resolve) => { this.recorder.onstop = resolve; });
    this.recorder.start();
    this.startedAt = performance.now();
  }

  /** Seconds since start, for a running clock. */
  elapsed() { return (performance.now() - this.startedAt) / 1000; }

  async stop() {
    this.recorder.stop();
    await this.stopped;
    for (const track of this.stream.getTracks()) track.stop();
    // Browsers record WebM or MP4, which the server does not decode (WAV, FLAC, OGG): decode the
    // take here, at the model's rate, and send it as 16-bit WAV.
    const recorded = new Blob(this.chunks, { type: this.recorder.mimeType });
    const audio = await new OfflineAudioContext(1, 1, RATE).decodeAudioData(await recorded.arrayBuffer());
    const mono = new Float32Array(audio.length);
    for (let c = 0; c < audio.numberOfChannels; c++) {
      const channel = audio.getChannelData(c);
      for (let i = 0; i < mono.length; i++) mono[i] += channel[i] / audio.numberOfChannels;
    }
    return { file: new Blob([wavFile(mono, RATE)], { type: 'audio/wav' }), seconds: audio.duration };
  }
}

/** A 16-bit mono WAV file of `samples` (floats in [-1, 1]) at `rate`. */
export function wavFile(samples, rate) {
  const bytes = new ArrayBuffer(44 + samples.length * 2);
  const view = new DataView(bytes);
  const ascii = (at, text) => { for (let i = 0; i < text.length; i++) view.setUint8(at + i, text.charCodeAt(i)); };
  ascii(0, 'RIFF');
  view.setUint32(4, 36 + samples.length * 2, true);
  ascii(8, 'WAVE');
  ascii(12, 'fmt ');
  view.setUint32(16, 16, true); // the fmt chunk's size
  view.setUint16(20, 1, true); // PCM
  view.setUint16(22, 1, true); // mono
  view.setUint32(24, rate, true);
  view.setUint32(28, rate * 2, true); // bytes per second
  view.setUint16(32, 2, true); // bytes per frame
  view.setUint16(34, 16, true); // bits per sample
  ascii(36, 'data');
  view.setUint32(40, samples.length * 2, true);
  for (let i = 0; i < samples.length; i++) {
    const v = Math.max(-1, Math.min(1, samples[i]));
    view.setInt16(44 + i * 2, v < 0 ? v * 0x8000 : v * 0x7fff, true);
  }
  return new Uint8Array(bytes);
}
