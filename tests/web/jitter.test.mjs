import assert from 'node:assert/strict';
import { test } from 'node:test';

import { JitterBuffer } from '../../web/jitter.js';

const QUANTUM = 128;

function buffer(target = 512) {
  return new JitterBuffer({ capacity: 48000, target, maxTarget: 4096, fade: 64 });
}

function render(jb, quanta) {
  const out = [];
  for (let i = 0; i < quanta; i++) {
    const block = new Float32Array(QUANTUM);
    jb.pull(block);
    out.push(...block);
  }
  return Float32Array.from(out);
}

test('waits for its target, then plays every sample in order', () => {
  const jb = buffer(512);
  jb.push(new Float32Array(300).fill(0.5));
  assert.ok(render(jb, 4).every((v) => v === 0)); // priming: silence
  assert.equal(jb.played, 0);
  const ramp = Float32Array.from({ length: 1000 }, (_, i) => i / 1000);
  jb.push(ramp);
  const out = render(jb, 4);
  assert.equal(jb.played, 512);
  assert.equal(jb.underruns, 0);
  // After the 64-sample fade-in, samples come through unchanged.
  assert.deepEqual(Array.from(out.subarray(64, 300)), new Array(236).fill(0.5));
});

test('an underrun is counted, grows the target and fades instead of clicking', () => {
  const jb = buffer(256);
  jb.push(new Float32Array(400).fill(1));
  const out = render(jb, 5); // 640 samples asked, 400 held
  assert.equal(jb.underruns, 1);
  assert.equal(jb.target, 384);
  assert.ok(out[399] < 0.05, 'faded out before the gap');
  const steps = out.slice(1).map((v, i) => Math.abs(v - out[i]));
  assert.ok(Math.max(...steps) <= 1 / 64 + 1e-6, 'no step larger than the fade slope');
  jb.push(new Float32Array(300).fill(1)); // below the new target: still waiting
  assert.ok(render(jb, 1).every((v) => v === 0));
});

test('the end of a stream is not an underrun', () => {
  const jb = buffer(256);
  jb.push(new Float32Array(300).fill(0.2));
  jb.finish();
  render(jb, 4);
  assert.equal(jb.underruns, 0);
  assert.equal(jb.played, 300);
});

test('clear empties it at once (barge-in)', () => {
  const jb = buffer(128);
  jb.push(new Float32Array(5000).fill(0.7));
  render(jb, 2);
  jb.clear();
  assert.equal(jb.level, 0);
  assert.ok(render(jb, 3).every((v) => v === 0));
  assert.equal(jb.underruns, 0);
});

test('only an exploding buffer drops, and then the oldest samples', () => {
  const jb = new JitterBuffer({ capacity: 1000, target: 10, maxTarget: 100 });
  jb.push(Float32Array.from({ length: 800 }, (_, i) => i));
  jb.push(Float32Array.from({ length: 500 }, (_, i) => 800 + i));
  assert.equal(jb.dropped, 300);
  assert.equal(jb.level, 1000);
  const out = render(jb, 1);
  assert.equal(out[127], 300 + 127); // continuous from the oldest kept sample
});

// A turn as a server delivers it: chunks of 1, 2, 4 then 8 frames of 80 ms (at 48 kHz), each
// arriving when the server has made it at `pace` times real time. Returns when playback started
// (in samples after the first arrival) and the underruns.
function turn(jb, pace, chunks = [1, 2, 4, 8, 8, 8, 8]) {
  const frame = 3840;
  const arrivals = [];
  let at = jb.clock + QUANTUM; // the first chunk comes within the next quantum
  const first = at;
  for (const frames of chunks) {
    arrivals.push({ at, samples: frames * frame });
    at += Math.round((frames * frame) / pace);
  }
  const underrunsBefore = jb.underruns;
  let started = null;
  let next = 0;
  while (next < arrivals.length || jb.level > 0 || jb.finishing) {
    while (next < arrivals.length && arrivals[next].at <= jb.clock) {
      jb.push(new Float32Array(arrivals[next].samples).fill(0.25));
      next += 1;
      if (next === arrivals.length) jb.finish();
    }
    if (jb.pull(new Float32Array(QUANTUM)) && started === null) started = jb.clock - QUANTUM - first;
  }
  return { started, underruns: jb.underruns - underrunsBefore };
}

test('a server slower than real time gaps its first turn; the next turns wait for its pace and play through', () => {
  const jb = new JitterBuffer({ capacity: 48000 * 60, target: 4320, maxTarget: 48000, fade: 144 });
  const first = turn(jb, 0.9); // slower than real time: no fixed start buffer is enough
  assert.ok(first.underruns > 0);
  assert.ok(jb.startDelay > 4320, `learned ${jb.startDelay}`);
  const second = turn(jb, 0.9);
  assert.equal(second.underruns, 0);
  assert.ok(second.started >= jb.startDelay, `${second.started} against ${jb.startDelay}`);
  assert.ok(second.started < jb.startDelay + 2 * QUANTUM); // and not much later than needed
  assert.equal(turn(jb, 0.9).underruns, 0);
});

test('a fast server keeps the start on the target alone', () => {
  const jb = new JitterBuffer({ capacity: 48000 * 60, target: 4320, maxTarget: 48000, fade: 144 });
  const first = turn(jb, 20);
  const second = turn(jb, 20);
  assert.equal(first.underruns + second.underruns, 0);
  assert.equal(jb.startDelay, 0);
  assert.equal(second.started, first.started); // no latency added
});

test('a server that slows down is waited for from its next turn, and one that recovers is not', () => {
  const jb = new JitterBuffer({ capacity: 48000 * 60, target: 4320, maxTarget: 48000, fade: 144 });
  turn(jb, 20);
  assert.ok(turn(jb, 0.8).underruns > 0);
  assert.ok(jb.startDelay > 4320);
  assert.equal(turn(jb, 0.8).underruns, 0);
  turn(jb, 20);
  assert.equal(jb.startDelay, 0); // the fast turn's pace needed no wait
});
