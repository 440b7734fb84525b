// The playback AudioWorklet: one JitterBuffer, fed samples by the main thread, pulled once per
// render quantum. Messages in: {type: 'push', samples, context}, {type: 'finish'},
// {type: 'clear'} (barge-in: empty now), {type: 'tap', on} (copy rendered audio back, for
// tests). Messages out, about every 50 ms: {type: 'stats', played, level, target, startDelay, underruns,
// firstFrame, context, contextPlayed}; with the tap on, {type: 'rendered', samples}.
import { JitterBuffer } from './jitter.js';

class VoicewirePlayerProcessor extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const { targetMs = 90, maxTargetMs = 1000 } = options.processorOptions || {};
    const rate = sampleRate; // the AudioContext's
    this.jitter = new JitterBuffer({
      capacity: rate * 60,
      target: Math.round((rate * targetMs) / 1000),
      maxTarget: Math.round((rate * maxTargetMs) / 1000),
      fade: Math.round(rate * 0.003),
    });
    this.context = null; // the context whose audio is queued
    this.firstFrame = null; // currentFrame when its first sample was rendered
    this.contextPlayed = 0; // samples of that context rendered
    this.tap = false;
    this.sinceStats = 0;
    this.port.onmessage = ({ data }) => {
      if (data.type === 'push') {
        if (data.context !== this.context) {
          this.context = data.context;
          this.firstFrame = null;
          this.contextPlayed = 0;
        }
        this.jitter.push(data.samples);
      } else if (data.type === 'finish') {
        this.jitter.finish();
      } else if (data.type === 'clear') {
        this.jitter.clear();
        this.context = null;
        this.report();
      } else if (data.type === 'tap') {
        this.tap = data.on;
      }
    };
  }

  report() {
    const j = this.jitter;
    this.port.postMessage({
      type: 'stats', played: j.played, level: j.level, target: j.target, startDelay: j.startDelay, underruns: j.underruns,
      dropped: j.dropped, firstFrame: this.firstFrame, context: this.context, contextPlayed: this.contextPlayed,
      frame: currentFrame,
    });
  }

  process(_, outputs) {
    const out = outputs[0][0];
    const taken = this.jitter.pull(out);
    this.contextPlayed += taken;
    if (taken && this.firstFrame === null) {
      this.firstFrame = currentFrame;
      this.report();
    }
    for (let c = 1; c < outputs[0].length; c++) outputs[0][c].set(out);
    if (this.tap && taken) this.port.postMessage({ type: 'rendered', samples: out.slice(0, taken) });
    this.sinceStats += out.length;
    if (this.sinceStats >= sampleRate / 20) {
      this.sinceStats = 0;
      this.report();
    }
    return true;
  }
}

registerProcessor('voicewire-player', VoicewirePlayerProcessor);
