"""Train a small CNN on Fashion-MNIST and write it as ONNX (deterministic, CPU).

    sudo apt-get install dataset-fashion-mnist       # the IDX files, /usr/share/datasets/fashion-mnist
    .venv/bin/pip install torch==2.13.0              # or: pip install -e .[torch]
    .venv/bin/python pipelines/train_fashion_cnn.py  # ~2 min on 2 cores (one torch thread)

Trains on ``make_source("fashion_mnist", split="train")`` (all 60,000 images unless ``--train-limit``),
reports the accuracy on the held-out ``split="test"`` (10,000 images, 1,000 per class), then writes

* ``pipelines/models/fashion_cnn.onnx``: the graph built node by node with ``onnx.helper`` from the
  trained weights (Conv, Relu, MaxPool, Flatten, Gemm; no ``torch.onnx.export``), input ``input``
  float32 (N, 1, 28, 28) with pixels in [0, 1], output ``logits`` float32 (N, 10);
* ``pipelines/models/fashion_cnn.json``: held-out accuracy, sample counts, seed, opset, and the largest
  difference between the ONNX Runtime logits and torch's on the test split (checked < 1e-4).

Architecture: conv 16@3x3 -> ReLU -> maxpool 2 -> conv 32@3x3 -> ReLU -> maxpool 2 -> fc 64 -> ReLU ->
fc 10 (56,714 parameters; 28 -> 26 -> 13 -> 11 -> 5, so fc 64 sees 32*5*5 = 800 features).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from pathlib import Path

import numpy as np

from gcc_dask.sources import make_source

HERE = Path(__file__).resolve().parent
OPSET = 17
IR_VERSION = 8  # readable by onnxruntime >= 1.14
EVAL_CHUNK = 1000  # test images per forward pass (bounds the activation memory)


def build_model():
    import torch.nn as nn

    return nn.Sequential(
        nn.Conv2d(1, 16, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(800, 64), nn.ReLU(),
        nn.Linear(64, 10),
    )


def train(seed: int, epochs: int, batch_size: int, lr: float, train_limit: int | None):
    import torch

    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)  # the same reduction order on every machine size
    src = make_source("fashion_mnist", split="train", limit=train_limit)
    Xtr, ytr = src.read(0, len(src))
    X, y = torch.from_numpy(Xtr), torch.from_numpy(ytr)
    model = build_model()
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs)
    gen = torch.Generator().manual_seed(seed)
    loss_fn = torch.nn.CrossEntropyLoss()
    for epoch in range(epochs):
        t0 = time.perf_counter()
        model.train()
        perm = torch.randperm(len(X), generator=gen)
        total = 0.0
        for i in range(0, len(X), batch_size):
            idx = perm[i:i + batch_size]
            opt.zero_grad()
            loss = loss_fn(model(X[idx]), y[idx])
            loss.backward()
            opt.step()
            total += loss.item() * len(idx)
        sched.step()
        print(f"epoch {epoch + 1:2d}/{epochs}: train loss {total / len(X):.4f} "
              f"({time.perf_counter() - t0:.0f} s)", flush=True)
    model.eval()
    return model, len(X)


def to_onnx(model, doc: str):
    """Build the ONNX graph of the trained ``model`` from its weights with ``onnx.helper``."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    conv1, conv2, fc1, fc2 = (m for m in model if hasattr(m, "weight"))
    inits = []

    def w(name, param):
        inits.append(numpy_helper.from_array(param.detach().numpy().astype(np.float32), name))
        return name

    nodes = [
        helper.make_node("Conv", ["input", w("conv1.w", conv1.weight), w("conv1.b", conv1.bias)],
                         ["c1"], kernel_shape=[3, 3]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", w("conv2.w", conv2.weight), w("conv2.b", conv2.bias)],
                         ["c2"], kernel_shape=[3, 3]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("MaxPool", ["r2"], ["p2"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p2"], ["flat"], axis=1),
        helper.make_node("Gemm", ["flat", w("fc1.w", fc1.weight), w("fc1.b", fc1.bias)], ["f1"], transB=1),
        helper.make_node("Relu", ["f1"], ["a1"]),
        helper.make_node("Gemm", ["a1", w("fc2.w", fc2.weight), w("fc2.b", fc2.bias)], ["logits"],
                         transB=1),
    ]
    graph = helper.make_graph(
        nodes, "fashion_cnn",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 1, 28, 28])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])],
        initializer=inits,
    )
    onx = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                            producer_name="gcc-dask pipelines/train_fashion_cnn.py", doc_string=doc)
    onx.ir_version = IR_VERSION
    onnx.checker.check_model(onx, full_check=True)
    return onx


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--train-limit", type=int, default=None,
                    help="train on the first N training images only (default: all 60,000)")
    ap.add_argument("--out", type=Path, default=HERE / "models" / "fashion_cnn.onnx")
    args = ap.parse_args(argv)

    import onnx
    import onnxruntime as ort
    import torch

    t0 = time.perf_counter()
    model, n_train = train(args.seed, args.epochs, args.batch_size, args.lr, args.train_limit)
    train_seconds = time.perf_counter() - t0
    Xte, yte = make_source("fashion_mnist", split="test").read(0, 10000)
    with torch.no_grad():
        ref = np.concatenate([model(torch.from_numpy(Xte[i:i + EVAL_CHUNK])).numpy()
                              for i in range(0, len(Xte), EVAL_CHUNK)])
    acc = float((ref.argmax(1) == yte).mean())
    print(f"held-out accuracy on fashion_mnist[test] ({len(yte)} images): {acc:.4f}")

    onx = to_onnx(model, f"Small CNN trained on Fashion-MNIST split=train, {n_train} images "
                         f"(seed {args.seed}); held-out accuracy {acc:.4f} on split=test "
                         f"({len(yte)} images). Input pixels in [0, 1].")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(onx, args.out)
    sess = ort.InferenceSession(str(args.out), providers=["CPUExecutionProvider"])
    got = np.concatenate([sess.run(None, {"input": Xte[i:i + EVAL_CHUNK]})[0]
                          for i in range(0, len(Xte), EVAL_CHUNK)])
    diff = float(np.max(np.abs(got - ref)))
    onnx_acc = float((got.argmax(1) == yte).mean())
    print(f"ONNX Runtime vs torch logits: max |diff| = {diff:.2e}; ONNX accuracy {onnx_acc:.4f}")
    if not diff < 1e-4 or onnx_acc != acc:
        raise SystemExit(f"ONNX graph does not reproduce torch (max |diff| {diff:.2e})")

    metrics = {
        "model": args.out.name,
        "architecture": "conv16@3x3-relu-maxpool2-conv32@3x3-relu-maxpool2-fc64-relu-fc10",
        "parameters": int(sum(p.numel() for p in model.parameters())),
        "input": {"name": "input", "shape": ["N", 1, 28, 28], "dtype": "float32", "range": [0, 1]},
        "output": {"name": "logits", "shape": ["N", 10], "dtype": "float32"},
        "dataset": "Fashion-MNIST (Zalando) IDX files of Debian's dataset-fashion-mnist via "
                   "gcc_dask.sources (file order)",
        "train_split": "train", "train_samples": n_train,
        "heldout_split": "test", "heldout_samples": int(len(yte)),
        "heldout_accuracy": acc,
        "onnx_vs_torch_max_abs_logit_diff": diff,
        "seed": args.seed, "epochs": args.epochs, "batch_size": args.batch_size, "lr": args.lr,
        "optimizer": "Adam + cosine annealing", "onnx_opset": OPSET, "onnx_ir_version": IR_VERSION,
        "torch_version": torch.__version__, "onnx_version": onnx.__version__,
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
