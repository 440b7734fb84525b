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
