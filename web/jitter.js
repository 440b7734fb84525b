// The jitter buffer the playback worklet runs: a ring of samples that starts playing once it holds
// `target` samples, and on an underrun fades out, counts it, grows the target and primes again,
// fading back in, so gaps never click. `clear()` empties it at once (barge-in). Pure logic, no
// audio APIs, so Node tests it directly.
//
// The start also waits for the server's pace: each turn's audio arrivals say how late the audio
// came against a playback started at its first arrival (`lateness`, in samples: the start delay
// that would have played that turn without a gap), and the next turn waits that long before it
// starts. A server faster than real time leaves it near 0, so its turns start on `target` alone;
// a slow one (the tiny checkpoint on a small CPU) costs each later turn that much latency instead
// of gaps. Time is counted in rendered samples, so it is the audio clock's.

export class JitterBuffer {
  constructor({ capacity, target, maxTarget, fade = 64 }) {
    this.ring = new Float32Array(capacity);
    this.read = 0;
    this.size = 0;
    this.target = target;
    this.initialTarget = target;
    this.maxTarget = maxTarget;
    this.fade = fade;
    this.playing = false;
    this.gain = 0; // 0..1, ramps over `fade` samples
    this.underruns = 0;
    this.played = 0; // samples rendered from the stream (not the silence between)
    this.dropped = 0; // samples thrown away because the ring overflowed
    this.started = false; // anything played since the last clear
    this.finishing = false;
    this.clock = 0; // samples rendered, silence included: the audio clock
    this.startDelay = 0; // samples to wait after a turn's first arrival: the last turn's lateness
    this.firstArrival = null; // the clock at this turn's first arrival
    this.arrived = 0; // samples pushed since then
    this.lateness = 0;
  }

  get level() { return this.size; }

  push(samples) {
    if (this.firstArrival === null) this.firstArrival = this.clock;
    // Had playback begun at the first arrival, it would by now want (clock - firstArrival) samples.
    this.lateness = Math.max(this.lateness, this.clock - this.firstArrival - this.arrived);
    this.arrived += samples.length;
    let overflow = this.size + samples.length - this.ring.length;
    if (overflow > 0) {
      // Only when the buffer explodes: drop the oldest, keep the newest.
      const skip = Math.min(overflow, this.size);
      this.read = (this.read + skip) % this.ring.length;
      this.size -= skip;
      this.dropped += skip;
      overflow -= skip;
      if (overflow > 0) { samples = samples.subarray(overflow); this.dropped += overflow; }
    }
    let write = (this.read + this.size) % this.ring.length;
    for (let i = 0; i < samples.length; i++) {
      this.ring[write] = samples[i];
      write = write + 1 === this.ring.length ? 0 : write + 1;
    }
    this.size += samples.length;
  }

  /** Fill `out` (one render quantum); returns the samples of the stream it holds. */
  pull(out) {
    const now = this.clock; // this quantum renders [now, now + out.length)
    this.clock += out.length;
    if (!this.playing) {
      const waited = this.firstArrival !== null && now - this.firstArrival >= this.startDelay;
      if (this.size >= this.target && (waited || this.finishing)) { this.playing = true; }
      else { out.fill(0); return 0; }
    }
    const step = 1 / this.fade;
    let taken = 0;
    for (let i = 0; i < out.length; i++) {
      if (this.size === 0) {
        out.fill(0, i);
        break;
      }
      // Fade out over the last `fade` samples we hold, in over the first after (re)starting.
      const remaining = this.size;
      const want = remaining <= this.fade ? Math.min(this.gain, remaining / this.fade) : 1;
      this.gain = this.gain < want ? Math.min(want, this.gain + step) : want;
      out[i] = this.ring[this.read] * this.gain;
      this.read = this.read + 1 === this.ring.length ? 0 : this.read + 1;
      this.size -= 1;
      taken += 1;
    }
    this.played += taken;
    if (taken) this.started = true;
    if (this.size === 0 && taken < out.length) {
      if (this.finishing) this.clear(); // the end of the stream, not a gap
      else this.underrun();
    }
    return taken;
  }

  underrun() {
    this.playing = false;
    this.gain = 0;
    this.underruns += 1;
    this.target = Math.min(this.maxTarget, Math.round(this.target * 1.5));
  }

  /** The stream ended: play out what is left without counting the end as an underrun. */
  finish() {
    this.target = 0;
    this.finishing = true;
  }

  /** The turn is over (played out or cut off): the next waits as long as this one would have needed. */
  clear() {
    if (this.firstArrival !== null) this.startDelay = Math.min(this.maxTarget, this.lateness);
    this.firstArrival = null;
    this.arrived = 0;
    this.lateness = 0;
    this.read = 0;
    this.size = 0;
    this.playing = false;
    this.gain = 0;
    this.target = this.initialTarget;
    this.finishing = false;
    this.started = false;
  }
}
