"""One function per loss spec (shardsim.capture.plan's MSELoss, CrossEntropyLoss): each places
the model's output, declares the target or labels and emits the loss step, the scenario's last.

Signature: kind(builder, loss, out) -> None, where `out` is the model's output Value.
"""
from .plan import CaptureError
from .values import REPLICATE, Value, shard

TOKEN_SHARDS = (shard("seq"), shard("batch"))


def mse_loss(b, loss, out):
    """shardsim's masked MSE (shardsim.modules.mse_loss): the target placed like the output,
    whose tokens are whole (Replicate, Shard(seq) or Shard(batch))."""
    target = loss.target
    if tuple(target.shape) != tuple(out.shape):
        raise CaptureError(f"MSELoss target is {tuple(target.shape)} {target.dtype}; the "
                           f"model's output is {tuple(out.shape)}")
    out = b.whole(out, "the loss needs whole tokens")
    if b.place[out.name] not in (REPLICATE,) + TOKEN_SHARDS:
        out = b.redistribute(out, REPLICATE, "the loss needs whole tokens")
    b.declare(b.unique("target"), out.axes, target, "target", b.place[out.name],
              "MSELoss target")
    keys = dict(input=out.name, target=b.tensors[-1]["name"])
    if loss.valid_lengths is not None:
        keys["valid_lengths"] = loss.valid_lengths
    if out.axes[-1] != "hidden":
        keys["feature_axis"] = out.axes[-1]
    b.step("mse_loss", "shardsim's masked MSE (shardsim.modules.mse_loss)",
           Value(b.unique("loss"), [], []), REPLICATE, **keys)


def check_labels(labels, ignore_index, classes):
    """docs/ops/language-model.md, cross_entropy: every label a class in [0, classes) or
    ignore_index, and at least one not ignore_index; the first bad element named."""
    counted = labels != ignore_index
    bad = counted & ((labels < 0) | (labels >= classes))
    if bool(bad.any()):
        index = [int(i) for i in bad.nonzero()[0]]
        raise CaptureError(f"CrossEntropyLoss labels: element {index} is "
                           f"{int(labels[tuple(index)])}: a label is a class in [0, {classes}) "
                           f"or ignore_index ({ignore_index})")
    if not bool(counted.any()):
        raise CaptureError(f"CrossEntropyLoss labels: every label is ignore_index "
                           f"({ignore_index}); at least one token must count")


def cross_entropy(b, loss, out):
    """shardsim's cross_entropy over the output's last axis (the vocabulary). Logits
    Shard(vocab) (a column-parallel LM head) run Megatron's vocab-parallel cross-entropy; the
    labels are held like the logits' tokens: Shard(seq) or Shard(batch) when the logits are,
    else Replicate (always Replicate where the vocabulary is sharded)."""
    labels = loss.labels
    if len(out.axes) < 2 or tuple(labels.shape) != tuple(out.shape[:-1]):
        raise CaptureError(f"CrossEntropyLoss labels are {tuple(labels.shape)}; the model's "
                           f"output (the logits) is {tuple(out.shape)}: the labels have its "
                           f"axes but the last (the vocabulary)")
    check_labels(labels, loss.ignore_index, out.shape[-1])
    out = b.whole(out, "cross-entropy takes logits that are not Partial")
    placement = b.place[out.name]
    if placement not in (REPLICATE, shard(out.axes[-1])) + TOKEN_SHARDS:
        out = b.redistribute(out, REPLICATE, "cross-entropy needs whole tokens")
        placement = REPLICATE
    b.declare(b.unique("labels"), out.axes[:-1], labels, "target",
              placement if placement in TOKEN_SHARDS else REPLICATE, "CrossEntropyLoss labels")
    keys = dict(input=out.name, labels=b.tensors[-1]["name"],
                ignore_index=int(loss.ignore_index))
    if loss.label_smoothing:
        keys["label_smoothing"] = float(loss.label_smoothing)
    if loss.z_loss:
        keys["z_loss"] = float(loss.z_loss)
    if out.axes[-1] != "vocab":
        keys["vocab_axis"] = out.axes[-1]
    how = "vocab-parallel" if placement == shard(out.axes[-1]) else "whole vocabulary"
    b.step("cross_entropy", f"F.cross_entropy, mean over the labels that are not ignore_index "
           f"({how})", Value(b.unique("loss"), [], []), REPLICATE, **keys)
