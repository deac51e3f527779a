#!/usr/bin/python3
"""Fixtures for tests/test_tfjs.c: a small TF.js layers model that uses every
layer class and option models/tfjs.c supports (HWIO kernels, "same" padding
split unevenly by a stride-2 convolution, dilation, no bias, concatenation
along channels, MultiplyBeta, depthToSpace channel order, tanh, LeakyReLU,
nearest upsampling), with an input and the output computed here in NHWC by
numpy, independently of Lumen's NCHW graph.

Writes tests/ref/fixtures/tfjs/: model.json, group1-shard1of2.bin,
group1-shard2of2.bin (the weights split across two shards), x.npy (NCHW
input) and y.npy (NCHW output).  Run: /usr/bin/python3 tests/ref/gen_tfjs.py
"""
import json
import os

import numpy as np

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "tfjs")
rng = np.random.default_rng(11)


def conv(x, k, b, stride=1, dil=1, same=True):
    """x [H,W,C] NHWC, k [KH,KW,I,O] HWIO; TF's "same" rule."""
    H, W, _ = x.shape
    KH, KW, _, O = k.shape
    pads = []
    for n, kk in ((H, KH), (W, KW)):
        if same:
            out = -(-n // stride)
            total = max((out - 1) * stride + (kk - 1) * dil + 1 - n, 0)
            pads.append((total // 2, total - total // 2))
        else:
            pads.append((0, 0))
    xp = np.pad(x, (pads[0], pads[1], (0, 0)))
    OH = (xp.shape[0] - (KH - 1) * dil - 1) // stride + 1
    OW = (xp.shape[1] - (KW - 1) * dil - 1) // stride + 1
    y = np.zeros((OH, OW, O), np.float64)
    for i in range(KH):
        for j in range(KW):
            patch = xp[i * dil: i * dil + (OH - 1) * stride + 1: stride,
                       j * dil: j * dil + (OW - 1) * stride + 1: stride]
            y += patch @ k[i, j]
    return y + (b if b is not None else 0)


def depth_to_space(x, r):
    H, W, C = x.shape
    c = C // (r * r)
    return x.reshape(H, W, r, r, c).transpose(0, 2, 1, 3, 4).reshape(H * r, W * r, c)


def layer(cls, name, inputs, **cfg):
    cfg["name"] = name
    return {"class_name": cls, "name": name, "config": cfg,
            "inbound_nodes": [[[i, 0, 0, {}] for i in inputs]] if inputs else []}


def conv_layer(name, inp, filters, k, stride=1, dil=1, padding="same", act="linear", bias=True):
    return layer("Conv2D", name, [inp], filters=filters, kernel_size=[k, k], strides=[stride, stride],
                 padding=padding, data_format="channels_last", dilation_rate=[dil, dil], groups=1,
                 activation=act, use_bias=bias)


def main():
    os.makedirs(OUT, exist_ok=True)
    layers = [
        layer("InputLayer", "in", [], batch_input_shape=[None, None, None, 3], dtype="float32"),
        conv_layer("c1", "in", 4, 3, act="relu"),
        conv_layer("c2", "c1", 8, 3, stride=2),
        layer("PixelShuffle2x", "ps", ["c2"], scale=2),
        layer("Concatenate", "cat", ["c1", "ps"], axis=-1),
        conv_layer("c3", "cat", 4, 3, dil=2),
        conv_layer("lff", "c3", 4, 1, padding="valid", bias=False),
        layer("MultiplyBeta", "mb", ["lff"]),
        layer("Add", "add", ["c1", "mb"]),
        layer("Activation", "act", ["add"], activation="tanh"),
        layer("LeakyReLU", "leaky", ["act"], alpha=0.1),
        layer("UpSampling2D", "up", ["leaky"], size=[2, 2], data_format="channels_last",
              interpolation="nearest"),
        conv_layer("out", "up", 3, 3),
    ]
    shapes = {"c1": (3, 3, 3, 4), "c2": (3, 3, 4, 8), "c3": (3, 3, 6, 4), "lff": (1, 1, 4, 4),
              "out": (3, 3, 4, 3)}
    w = {}
    for n, s in shapes.items():
        w[n + "/kernel"] = rng.uniform(-0.5, 0.5, s).astype(np.float32)
        if n != "lff":
            w[n + "/bias"] = rng.uniform(-0.2, 0.2, s[3]).astype(np.float32)
    x = rng.uniform(0, 1, (6, 6, 3)).astype(np.float32)

    f = {k: v.astype(np.float64) for k, v in w.items()}
    c1 = np.maximum(conv(x, f["c1/kernel"], f["c1/bias"]), 0)
    c2 = conv(c1, f["c2/kernel"], f["c2/bias"], stride=2)
    ps = depth_to_space(c2, 2)
    cat = np.concatenate([c1, ps], axis=-1)
    c3 = conv(cat, f["c3/kernel"], f["c3/bias"], dil=2)
    lff = conv(c3, f["lff/kernel"], None, same=False)
    a = np.tanh(c1 + lff * np.float32(0.2))
    a = np.where(a >= 0, a, 0.1 * a)
    up = a.repeat(2, axis=0).repeat(2, axis=1)
    y = conv(up, f["out/kernel"], f["out/bias"])

    order = ["c1/kernel", "c1/bias", "c2/kernel", "c2/bias", "c3/kernel", "c3/bias",
             "lff/kernel", "out/kernel", "out/bias"]
    blob = b"".join(w[n].astype("<f4").tobytes() for n in order)
    half = len(blob) // 2
    with open(os.path.join(OUT, "group1-shard1of2.bin"), "wb") as fh:
        fh.write(blob[:half])
    with open(os.path.join(OUT, "group1-shard2of2.bin"), "wb") as fh:
        fh.write(blob[half:])
    model = {
        "format": "layers-model", "generatedBy": "tests/ref/gen_tfjs.py",
        "convertedBy": None,
        "modelTopology": {"keras_version": "2.10.0", "backend": "tensorflow", "model_config": {
            "class_name": "Functional", "config": {
                "name": "tiny", "layers": layers, "input_layers": [["in", 0, 0]],
                "output_layers": [["out", 0, 0]]}}},
        "weightsManifest": [{"paths": ["group1-shard1of2.bin", "group1-shard2of2.bin"],
                             "weights": [{"name": n, "shape": list(w[n].shape), "dtype": "float32"}
                                         for n in order]}],
    }
    with open(os.path.join(OUT, "model.json"), "w") as fh:
        json.dump(model, fh)
    np.save(os.path.join(OUT, "x.npy"), x.transpose(2, 0, 1)[None].astype(np.float32))
    np.save(os.path.join(OUT, "y.npy"), y.transpose(2, 0, 1)[None].astype(np.float32))


if __name__ == "__main__":
    main()
