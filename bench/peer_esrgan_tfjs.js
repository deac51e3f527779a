// bench/peer_esrgan_tfjs.js MODEL_JSON DIR [RUNS] - the TF.js peer of
// bench/esrgan.c: UpscalerJS's esrgan-thick x4 loaded by TensorFlow.js
// (layers API, UpscalerJS's MultiplyBeta and PixelShuffle4x registered as
// the package defines them) on the wasm backend, run on DIR/in.npy; checks
// the output against Lumen's DIR/out.npy and prints seconds per run.
// Needs NODE_PATH=build/bench-tfjs/node_modules (bench/esrgan.sh sets it).
const fs = require('fs');
const path = require('path');
const tf = require('@tensorflow/tfjs');
require('@tensorflow/tfjs-backend-wasm');

function readNpy(file) {   // little-endian f4, C order
  const b = fs.readFileSync(file);
  const hlen = b.readUInt16LE(8);
  const header = b.toString('latin1', 10, 10 + hlen);
  if (!header.includes("'<f4'") || header.includes('True')) throw new Error(file + ': not <f4 C order');
  const shape = header.match(/\(([^)]*)\)/)[1].split(',').filter((s) => s.trim()).map(Number);
  const data = new Float32Array(b.buffer.slice(b.byteOffset + 10 + hlen, b.byteOffset + b.length));
  return {shape, data};
}

function register(scale) {   // as UpscalerJS's esrgan.js
  class MultiplyBeta extends tf.layers.Layer {
    constructor() { super({}); this.beta = 0.2; }
    call(inputs) { return tf.mul(Array.isArray(inputs) ? inputs[0] : inputs, this.beta); }
    static get className() { return 'MultiplyBeta'; }
  }
  class PixelShuffle extends tf.layers.Layer {
    constructor() { super({}); this.scale = scale; }
    computeOutputShape(s) { return [s[0], s[1], s[2], 3]; }
    call(inputs) { return tf.depthToSpace(Array.isArray(inputs) ? inputs[0] : inputs, this.scale, 'NHWC'); }
    static get className() { return `PixelShuffle${scale}x`; }
  }
  tf.serialization.registerClass(MultiplyBeta);
  tf.serialization.registerClass(PixelShuffle);
}

function fileHandler(modelJson) {
  return {
    load: async () => {
      const m = JSON.parse(fs.readFileSync(modelJson, 'utf8'));
      const specs = [], parts = [];
      for (const g of m.weightsManifest) {
        specs.push(...g.weights);
        for (const p of g.paths) parts.push(fs.readFileSync(path.join(path.dirname(modelJson), p)));
      }
      const all = Buffer.concat(parts);
      return {modelTopology: m.modelTopology, weightSpecs: specs,
              weightData: all.buffer.slice(all.byteOffset, all.byteOffset + all.length)};
    },
  };
}

async function main() {
  const [modelJson, dir, runsArg] = process.argv.slice(2);
  const runs = Number(runsArg || 2);
  await tf.setBackend('wasm');
  await tf.ready();
  register(4);
  const model = await tf.loadLayersModel(fileHandler(modelJson));
  const x = readNpy(path.join(dir, 'in.npy'));           // [1, 3, H, W]
  const [, C, H, W] = x.shape;
  const input = tf.tidy(() => tf.tensor4d(x.data, [1, C, H, W]).transpose([0, 2, 3, 1]));
  let y = model.predict(input);                           // warm-up
  const out = await y.transpose([0, 3, 1, 2]).data();
  y.dispose();
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < runs; i++) {
    y = model.predict(input);
    await y.data();
    y.dispose();
  }
  const s = Number(process.hrtime.bigint() - t0) / 1e9 / runs;
  const lum = readNpy(path.join(dir, 'out.npy')).data;
  let diff = 0;
  for (let i = 0; i < lum.length; i++) diff = Math.max(diff, Math.abs(lum[i] - out[i]));
  const threads = tf.getBackend() === 'wasm' ? 'wasm' : tf.getBackend();
  console.log(`INFO esrgan-thick x4: TF.js ${tf.version.tfjs} (${threads}) vs Lumen output max abs diff ${diff.toPrecision(3)}`);
  console.log(`PEER esrgan_thick_x4_256px tfjs-${threads} ${s.toPrecision(4)} s`);
}

main().catch((e) => { console.error(e); process.exit(1); });
