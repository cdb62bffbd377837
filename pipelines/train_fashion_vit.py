"""Train a small Vision Transformer on Fashion-MNIST and write it as ONNX (deterministic, CPU).

    sudo apt-get install dataset-fashion-mnist       # the IDX files, /usr/share/datasets/fashion-mnist
    .venv/bin/pip install torch==2.13.0              # or: pip install -e .[torch]
    .venv/bin/python pipelines/train_fashion_vit.py  # one torch thread, 15 epochs: ~9 min idle, 51 loaded

Trains on ``make_source("fashion_mnist", split="train")`` (all 60,000 images unless ``--train-limit``),
reports the accuracy on the held-out ``split="test"`` (10,000 images, 1,000 per class), then writes

* ``pipelines/models/fashion_vit.onnx``: the graph built node by node with ``onnx.helper`` from the
  trained weights (Conv, Reshape, Transpose, LayerNormalization, MatMul, Softmax, Erf, ReduceMean,
  Gemm; no ``torch.onnx.export``), input ``input`` float32 (N, 1, 28, 28) with pixels in [0, 1],
  output ``logits`` float32 (N, 10), N dynamic;
* ``pipelines/models/fashion_vit.json``: held-out accuracy, sample counts, seed, opset, the largest
  difference between the ONNX Runtime logits and torch's on the test split (checked < 1e-4) and the
  largest difference between batches of 1, 64 and 512 images and the same rows of one batch of 512.

Architecture (a ViT, Dosovitskiy et al., "An Image is Worth 16x16 Words", ICLR 2021, at a small
scale): 7x7 patches (16 tokens) embedded to 64 by a stride-7 convolution, plus learned position
embeddings; 6 pre-norm encoder blocks, each x + MHSA(LN(x)) with 4 heads of 16, then
x + MLP(LN(x)) with a 128-unit GELU hidden layer; a final LayerNorm, the mean over the 16 tokens,
and a linear head to 10 logits (205,834 parameters). Trained with AdamW (weight decay 0.05), a linear
warm-up over the first 5% of the steps then cosine decay, and random horizontal flips.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import time
from pathlib import Path

import numpy as np

from gcc_dask.sources import make_source

HERE = Path(__file__).resolve().parent
OPSET = 17       # LayerNormalization needs >= 17; ReduceMean still takes `axes` as an attribute
IR_VERSION = 8   # readable by onnxruntime >= 1.14
EVAL_CHUNK = 1000  # test images per forward pass (bounds the activation memory)
PATCH, DIM, HEADS, MLP, DEPTH = 7, 64, 4, 128, 6
TOKENS = (28 // PATCH) ** 2
LN_EPS = 1e-5
BATCH_CHECKS = (1, 64, 512)  # batch sizes whose rows must match one batch of 512


def build_model():
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Block(nn.Module):
        """Pre-norm encoder block: x + MHSA(LN(x)), then x + MLP(LN(x))."""

        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(DIM, eps=LN_EPS)
            self.q, self.k, self.v, self.o = (nn.Linear(DIM, DIM) for _ in range(4))
            self.ln2 = nn.LayerNorm(DIM, eps=LN_EPS)
            self.fc1, self.fc2 = nn.Linear(DIM, MLP), nn.Linear(MLP, DIM)

        def forward(self, x):
            n, t, _ = x.shape
            dh = DIM // HEADS
            y = self.ln1(x)
            q = self.q(y).reshape(n, t, HEADS, dh).transpose(1, 2)     # (n, h, t, dh)
            k = self.k(y).reshape(n, t, HEADS, dh).permute(0, 2, 3, 1)  # (n, h, dh, t)
            v = self.v(y).reshape(n, t, HEADS, dh).transpose(1, 2)
            a = torch.softmax((q @ k) * dh ** -0.5, dim=-1) @ v          # (n, h, t, dh)
            x = x + self.o(a.transpose(1, 2).reshape(n, t, DIM))
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))           # exact (erf) GELU

    class ViT(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Conv2d(1, DIM, PATCH, stride=PATCH)
            self.pos = nn.Parameter(torch.zeros(1, TOKENS, DIM))
            nn.init.trunc_normal_(self.pos, std=0.02)
            self.blocks = nn.ModuleList(Block() for _ in range(DEPTH))
            self.ln = nn.LayerNorm(DIM, eps=LN_EPS)
            self.head = nn.Linear(DIM, 10)

        def forward(self, x):
            x = self.embed(x).flatten(2).transpose(1, 2) + self.pos     # (n, 16, 64)
            for block in self.blocks:
                x = block(x)
            return self.head(self.ln(x).mean(1))

    return ViT()


def train(seed: int, epochs: int, batch_size: int, lr: float, weight_decay: float,
          train_limit: int | None):
    import torch

    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)  # the same reduction order on every machine size
    src = make_source("fashion_mnist", split="train", limit=train_limit)
    Xtr, ytr = src.read(0, len(src))
    X, y = torch.from_numpy(Xtr), torch.from_numpy(ytr)
    model = build_model()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    steps = epochs * math.ceil(len(X) / batch_size)
    warmup = max(1, steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps)))
    gen = torch.Generator().manual_seed(seed)
    loss_fn = torch.nn.CrossEntropyLoss()
    for epoch in range(epochs):
        t0 = time.perf_counter()
        model.train()
        perm = torch.randperm(len(X), generator=gen)
        total = 0.0
        for i in range(0, len(X), batch_size):
            idx = perm[i:i + batch_size]
            flip = torch.rand(len(idx), generator=gen) < 0.5
            xb = torch.where(flip[:, None, None, None], X[idx].flip(-1), X[idx])
            opt.zero_grad()
            loss = loss_fn(model(xb), y[idx])
            loss.backward()
            opt.step()
            sched.step()
            total += loss.item() * len(idx)
        print(f"epoch {epoch + 1:2d}/{epochs}: train loss {total / len(X):.4f} "
              f"({time.perf_counter() - t0:.0f} s)", flush=True)
    model.eval()
    return model, len(X)


def to_onnx(model, doc: str):
    """Build the ONNX graph of the trained ``model`` from its weights with ``onnx.helper``."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    inits, nodes = [], []

    def const(name, value, dtype=np.float32):
        inits.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def w(name, param):
        return const(name, param.detach().numpy())

    def node(op, inputs, output, **attrs):
        nodes.append(helper.make_node(op, inputs, [output], **attrs))
        return output

    def linear(x, lin, name):  # torch's Linear: x @ W.T + b
        xw = node("MatMul", [x, const(f"{name}.wT", lin.weight.detach().numpy().T)], f"{name}.xw")
        return node("Add", [xw, w(f"{name}.b", lin.bias)], name)

    def layer_norm(x, ln, name):
        return node("LayerNormalization", [x, w(f"{name}.g", ln.weight), w(f"{name}.b", ln.bias)], name,
                    axis=-1, epsilon=LN_EPS)

    dh = DIM // HEADS
    heads_shape = const("shape.heads", [0, 0, HEADS, dh], np.int64)  # 0: keep that input dimension
    tokens_shape = const("shape.tokens", [0, 0, DIM], np.int64)
    patches_shape = const("shape.patches", [0, DIM, -1], np.int64)
    scale = const("attn.scale", dh ** -0.5)
    half, one = const("gelu.half", 0.5), const("gelu.one", 1.0)
    inv_sqrt2 = const("gelu.inv_sqrt2", 1 / math.sqrt(2))

    e = node("Conv", ["input", w("embed.w", model.embed.weight), w("embed.b", model.embed.bias)],
             "embed", kernel_shape=[PATCH, PATCH], strides=[PATCH, PATCH])       # (N, 64, 4, 4)
    e = node("Reshape", [e, patches_shape], "embed.flat")                          # (N, 64, 16)
    e = node("Transpose", [e], "embed.tokens", perm=[0, 2, 1])                     # (N, 16, 64)
    x = node("Add", [e, w("pos", model.pos)], "x0")
    for i, blk in enumerate(model.blocks):
        p = f"block{i}"
        y = layer_norm(x, blk.ln1, f"{p}.ln1")
        q = node("Reshape", [linear(y, blk.q, f"{p}.q"), heads_shape], f"{p}.q4")
        k = node("Reshape", [linear(y, blk.k, f"{p}.k"), heads_shape], f"{p}.k4")
        v = node("Reshape", [linear(y, blk.v, f"{p}.v"), heads_shape], f"{p}.v4")
        q = node("Transpose", [q], f"{p}.qh", perm=[0, 2, 1, 3])                  # (N, h, t, dh)
        k = node("Transpose", [k], f"{p}.kh", perm=[0, 2, 3, 1])                  # (N, h, dh, t)
        v = node("Transpose", [v], f"{p}.vh", perm=[0, 2, 1, 3])
        s = node("Mul", [node("MatMul", [q, k], f"{p}.qk"), scale], f"{p}.scores")
        a = node("MatMul", [node("Softmax", [s], f"{p}.attn", axis=-1), v], f"{p}.av")
        a = node("Transpose", [a], f"{p}.at", perm=[0, 2, 1, 3])                  # (N, t, h, dh)
        a = node("Reshape", [a, tokens_shape], f"{p}.merged")
        x = node("Add", [x, linear(a, blk.o, f"{p}.o")], f"{p}.x1")
        hdn = linear(layer_norm(x, blk.ln2, f"{p}.ln2"), blk.fc1, f"{p}.fc1")
        erf = node("Erf", [node("Mul", [hdn, inv_sqrt2], f"{p}.scaled")], f"{p}.erf")
        gelu = node("Mul", [node("Mul", [hdn, half], f"{p}.halfx"),
                            node("Add", [erf, one], f"{p}.erf1")], f"{p}.gelu")     # x Φ(x)
        x = node("Add", [x, linear(gelu, blk.fc2, f"{p}.fc2")], f"{p}.x2")
    pooled = node("ReduceMean", [layer_norm(x, model.ln, "ln")], "pooled", axes=[1], keepdims=0)
    node("Gemm", [pooled, w("head.w", model.head.weight), w("head.b", model.head.bias)], "logits",
         transB=1)
    graph = helper.make_graph(
        nodes, "fashion_vit",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 1, 28, 28])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])],
        initializer=inits,
    )
    onx = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                            producer_name="gcc-dask pipelines/train_fashion_vit.py", doc_string=doc)
    onx.ir_version = IR_VERSION
    onnx.checker.check_model(onx, full_check=True)
    return onx


def batch_mismatch(sess, X: np.ndarray) -> float:
    """Largest |difference| between the logits of batches of 1, 64 and 512 rows and one batch of 512."""
    ref = sess.run(None, {"input": X[:512]})[0]
    worst = 0.0
    for size in BATCH_CHECKS:
        rows = np.concatenate([sess.run(None, {"input": X[i:i + size]})[0]
                               for i in range(0, 512, size)])
        worst = max(worst, float(np.max(np.abs(rows - ref[:len(rows)]))))
    return worst


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--epochs", type=int, default=15)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--weight-decay", type=float, default=0.05)
    ap.add_argument("--train-limit", type=int, default=None,
                    help="train on the first N training images only (default: all 60,000)")
    ap.add_argument("--out", type=Path, default=HERE / "models" / "fashion_vit.onnx")
    args = ap.parse_args(argv)

    import onnx
    import onnxruntime as ort
    import torch

    t0 = time.perf_counter()
    model, n_train = train(args.seed, args.epochs, args.batch_size, args.lr, args.weight_decay,
                           args.train_limit)
    train_seconds = time.perf_counter() - t0
    Xte, yte = make_source("fashion_mnist", split="test").read(0, 10000)
    with torch.no_grad():
        ref = np.concatenate([model(torch.from_numpy(Xte[i:i + EVAL_CHUNK])).numpy()
                              for i in range(0, len(Xte), EVAL_CHUNK)])
    acc = float((ref.argmax(1) == yte).mean())
    print(f"held-out accuracy on fashion_mnist[test] ({len(yte)} images): {acc:.4f}")

    onx = to_onnx(model, f"Small Vision Transformer trained on Fashion-MNIST split=train, {n_train} "
                         f"images (seed {args.seed}); held-out accuracy {acc:.4f} on split=test "
                         f"({len(yte)} images). Input pixels in [0, 1].")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(onx, args.out)
    sess = ort.InferenceSession(str(args.out), providers=["CPUExecutionProvider"])
    got = np.concatenate([sess.run(None, {"input": Xte[i:i + EVAL_CHUNK]})[0]
                          for i in range(0, len(Xte), EVAL_CHUNK)])
    diff = float(np.max(np.abs(got - ref)))
    onnx_acc = float((got.argmax(1) == yte).mean())
    batch_diff = batch_mismatch(sess, Xte)
    print(f"ONNX Runtime vs torch logits: max |diff| = {diff:.2e}; ONNX accuracy {onnx_acc:.4f}; "
          f"batches of {', '.join(map(str, BATCH_CHECKS))} vs one of 512: max |diff| = {batch_diff:.2e}")
    if not diff < 1e-4 or onnx_acc != acc:
        raise SystemExit(f"ONNX graph does not reproduce torch (max |diff| {diff:.2e}, "
                         f"accuracy {onnx_acc:.4f} against {acc:.4f})")
    if not batch_diff < 1e-5:
        raise SystemExit(f"ONNX graph depends on the batch size (max |diff| {batch_diff:.2e})")

    metrics = {
        "model": args.out.name,
        "architecture": f"vit: patch{PATCH}x{PATCH} ({TOKENS} tokens) embed{DIM} + learned positions, "
                        f"{DEPTH} pre-norm blocks (mhsa {HEADS} heads + mlp{MLP} gelu), "
                        f"layernorm, mean pool, fc10",
        "parameters": int(sum(p.numel() for p in model.parameters())),
        "input": {"name": "input", "shape": ["N", 1, 28, 28], "dtype": "float32", "range": [0, 1]},
        "output": {"name": "logits", "shape": ["N", 10], "dtype": "float32"},
        "dataset": "Fashion-MNIST (Zalando) IDX files of Debian's dataset-fashion-mnist via "
                   "gcc_dask.sources (file order)",
        "train_split": "train", "train_samples": n_train,
        "heldout_split": "test", "heldout_samples": int(len(yte)),
        "heldout_accuracy": acc,
        "onnx_vs_torch_max_abs_logit_diff": diff,
        "batch_1_64_512_vs_512_max_abs_logit_diff": batch_diff,
        "seed": args.seed, "epochs": args.epochs, "batch_size": args.batch_size, "lr": args.lr,
        "weight_decay": args.weight_decay,
        "optimizer": "AdamW, linear warm-up (5% of steps) + cosine decay",
        "augmentation": "random horizontal flip (p = 0.5)",
        "onnx_opset": OPSET, "onnx_ir_version": IR_VERSION,
        "torch_version": torch.__version__, "onnx_version": onnx.__version__,
        "onnxruntime_version": ort.__version__, "torch_threads": torch.get_num_threads(),
        "onnx_bytes": args.out.stat().st_size,
        "onnx_sha256": hashlib.sha256(args.out.read_bytes()).hexdigest(),
        "train_seconds": round(train_seconds, 1),
        "total_seconds": round(time.perf_counter() - t0, 1),
    }
    args.out.with_suffix(".json").write_text(json.dumps(metrics, indent=2) + "\n")
    print(f"wrote {args.out} ({metrics['onnx_bytes']} bytes) and {args.out.with_suffix('.json').name}")
    return metrics


if __name__ == "__main__":
    main()
