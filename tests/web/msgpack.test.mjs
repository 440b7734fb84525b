import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { test } from 'node:test';

import { decode, encode } from '../../web/msgpack.js';

const python = process.env.VOICEWIRE_PYTHON || 'python3';

function pythonPack(json) {
  // The reference: Python's msgpack package packing the same value.
  const script = 'import json,sys,msgpack; v=json.loads(sys.argv[1]); sys.stdout.write(msgpack.packb(v, use_bin_type=True).hex())';
  return execFileSync(python, ['-c', script, JSON.stringify(json)]).toString();
}

const hex = (bytes) => Buffer.from(bytes).toString('hex');

test('encodes like the reference msgpack', () => {
  const values = [
    null, true, false, 0, 1, 127, 128, 255, 256, 65535, 65536, 4294967295, -1, -32, -33, -128, -129,
    -32768, -32769, -2147483648, 1.5, -0.25, '', 'a', 'x'.repeat(31), 'x'.repeat(32), 'y'.repeat(300),
    'héllo ✓ 你好', [], [1, 2, 3], new Array(16).fill(7), {}, { type: 'text', context_id: 't1', text: 'Hi' },
    { nested: { list: [1, 'two', null, false], n: -5 } },
  ];
  for (const value of values) assert.equal(hex(encode(value)), pythonPack(value), JSON.stringify(value));
});

test('round-trips bin, big maps and long strings', () => {
  const bin = new Uint8Array(70000).map((_, i) => i % 251);
  const map = Object.fromEntries(Array.from({ length: 20 }, (_, i) => [`k${i}`, i]));
  const value = { type: 'audio', data: bin, map, s: 'z'.repeat(70000), small: new Uint8Array([1, 2]) };
  const back = decode(encode(value));
  assert.deepEqual(back.data, bin);
  assert.deepEqual(back.small, new Uint8Array([1, 2]));
  assert.deepEqual(back.map, map);
  assert.equal(back.s.length, 70000);
});

test('decodes what the server sends', () => {
  const script = "import sys,msgpack; sys.stdout.write(msgpack.packb({'type':'audio','seq':3,'pts':96000,'samples':960,'data':bytes([0,255,7]),'final':False,'f':0.5,'big':2**40,'neg':-2**40}).hex())";
  const bytes = Buffer.from(execFileSync(python, ['-c', script]).toString(), 'hex');
  const message = decode(new Uint8Array(bytes));
  assert.equal(message.type, 'audio');
  assert.equal(message.pts, 96000);
  assert.deepEqual(message.data, new Uint8Array([0, 255, 7]));
  assert.equal(message.final, false);
  assert.equal(message.f, 0.5);
  assert.equal(message.big, 2 ** 40);
  assert.equal(message.neg, -(2 ** 40));
});

test('rejects truncated and trailing data', () => {
  const bytes = encode({ type: 'ping' });
  assert.throws(() => decode(bytes.subarray(0, bytes.length - 1)), /truncated/);
  assert.throws(() => decode(new Uint8Array([...bytes, 0])), /trailing/);
  assert.throws(() => decode(new Uint8Array([0xc1])), /unsupported type byte 0xc1/);
});
