"""The arguments of shardsim.capture.capture, checked before anything is traced or written, by
the rules `shardsim run` applies to the scenario they become (sim/scenario/loader.cpp header
and training, loader_steps.cpp stream, ops/loss.cpp mse_loss_rules, the cross_entropy keys of
docs/ops/language-model.md, input_files.cpp), so that
a capture either writes a scenario shardsim accepts or raises CaptureError naming the argument.
"""
import math
import numbers
import os
import re

import torch

from .plan import LOSSES, CaptureError, CrossEntropyLoss, MSELoss

DTYPES = (torch.float64, torch.float32, torch.bfloat16, torch.float16)
F32_MAX = 3.4028234663852886e+38
INT64_MAX = 2**63 - 1


def integer(value, what, low, high):
    """An int (not a bool, not a float that happens to be whole) in [low, high]."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise CaptureError(f"{what}={value!r}: expected an integer in [{low}, {high}]")
    if not low <= int(value) <= high:
        raise CaptureError(f"{what}={value!r}: out of range: expected an integer in "
                           f"[{low}, {high}]")
    return int(value)


def has_control_character(text):
    """loader.cpp has_control_character (error.hpp escaped): C0, DEL, C1, or a bidirectional
    override or isolate (U+202A-U+202E, U+2066-U+2069); shardsim prints names as they are."""
    return any(ord(c) < 0x20 or 0x7f <= ord(c) <= 0x9f or 0x202a <= ord(c) <= 0x202e
               or 0x2066 <= ord(c) <= 0x2069 for c in text)


def precision_key(text):
    """scalar.cpp parse_precision: bf16, f16, f32, f64, dd, qd or mpN (64 <= N <= 65536); the
    key two spellings of one precision share (mp0128 is mp128)."""
    if text in ("f32", "f64", "bf16", "f16", "dd", "qd"):
        return text
    m = re.fullmatch(r"mp([0-9]+)", text)
    if m and 64 <= int(m.group(1)) <= 65536:
        return f"mp{int(m.group(1))}"
    return None


def check_precisions(precisions):
    """loader.cpp header: a non-empty list of known precisions, none twice."""
    if isinstance(precisions, str) or not isinstance(precisions, (list, tuple)) or not precisions:
        raise CaptureError(f"precisions={precisions!r}: expected a non-empty list or tuple of "
                           f"precision names, e.g. ('f32', 'f64', 'mp256')")
    seen = set()
    for i, p in enumerate(precisions):
        key = precision_key(p) if isinstance(p, str) else None
        if key is None:
            raise CaptureError(f"precisions[{i}]={p!r}: expected bf16, f16, f32, f64, dd, qd or "
                               f"mp<bits> with 64 <= bits <= 65536 (e.g. mp256)")
        if key in seen:
            raise CaptureError(f"precisions[{i}]={p!r}: precision '{key}' is listed twice")
        seen.add(key)
    return list(precisions)


def check_tensor(value, what, ids=False):
    """A model input or loss target: a (batch, seq, hidden) floating tensor of positive
    extents, which the capture writes to inputs.safetensors; ids: a model input may also be
    (batch, seq) torch.int64 token ids, written as an i64 tensor."""
    if not isinstance(value, torch.Tensor):
        raise CaptureError(f"{what} is {type(value).__name__}, not a torch.Tensor")
    token_ids = ids and value.dim() == 2 and value.dtype == torch.int64
    if (not token_ids and (value.dim() != 3 or value.dtype not in DTYPES)) or (
            min(value.shape) < 1):
        also = " or (batch, seq) torch.int64 token ids" if ids else ""
        raise CaptureError(f"{what} is {tuple(value.shape)} {value.dtype}; inputs are (batch, "
                           f"seq, hidden) floating tensors (float64, float32, bfloat16, float16)"
                           f"{also} with positive extents")


def check_cross_entropy(loss):
    """The cross_entropy keys (docs/ops/language-model.md): labels a torch.int64 tensor of
    positive extents (their values against the vocabulary: the builder), ignore_index an
    integer of the i64 range, label_smoothing in [0, 1], z_loss in [0, 1e6]."""
    labels = loss.labels
    if not isinstance(labels, torch.Tensor):
        raise CaptureError(f"CrossEntropyLoss labels are {type(labels).__name__}, not a "
                           f"torch.Tensor")
    if labels.dtype != torch.int64 or labels.dim() < 1 or min(labels.shape) < 1:
        raise CaptureError(f"CrossEntropyLoss labels are {tuple(labels.shape)} {labels.dtype}; "
                           f"labels are class indices, a torch.int64 tensor of the logits' token "
                           f"axes (batch, seq) (class probabilities are not supported)")
    integer(loss.ignore_index, "CrossEntropyLoss ignore_index", -INT64_MAX - 1, INT64_MAX)
    for what, value, high in (("label_smoothing", loss.label_smoothing, 1.0),
                              ("z_loss", loss.z_loss, 1e6)):
        if (isinstance(value, bool) or not isinstance(value, numbers.Real)
                or not math.isfinite(value) or not 0 <= value <= high):
            raise CaptureError(f"CrossEntropyLoss {what}={value!r}: expected a number in "
                               f"[0, {high:g}]")


def check_valid_lengths(loss, batch, seq):
    """ops/loss.cpp mse_loss_rules: one length per batch element, each in [0, seq], some > 0."""
    lengths = loss.valid_lengths
    if lengths is None:
        return
    if len(lengths) != batch:
        raise CaptureError(f"MSELoss valid_lengths={lengths}: needs one length per batch element "
                           f"({batch}), got {len(lengths)}")
    for n in lengths:
        if not 0 <= n <= seq:
            raise CaptureError(f"MSELoss valid_lengths={lengths}: each length must be in "
                               f"[0, {seq}] (seq)")
    if sum(lengths) == 0:
        raise CaptureError(f"MSELoss valid_lengths={lengths}: at least one token must be valid")


def check_training(loss, train_steps, lr):
    """loader.cpp training: train_steps in [1, 100000] with a loss; learning_rate > 0, finite,
    within the f32 range, and only with train_steps (without them it would be written and
    never used)."""
    if train_steps is not None:
        integer(train_steps, "train_steps", 1, 100000)
        if loss is None:
            raise CaptureError("train_steps needs a loss (loss=MSELoss(target) or "
                               "CrossEntropyLoss(labels))")
    if lr is None:
        return
    if train_steps is None:
        raise CaptureError(f"lr={lr!r} without train_steps: the learning rate is used only by "
                           f"training steps; pass train_steps=K (or drop lr)")
    if (isinstance(lr, bool) or not isinstance(lr, numbers.Real) or not math.isfinite(lr)
            or not 0 < lr <= F32_MAX):
        raise CaptureError(f"lr={lr!r}: the learning rate must be a number > 0 and within the "
                           f"f32 range (f32 runs use float(learning_rate))")


def check_stream(stream, loss, seqs):
    """loader_steps.cpp stream: positive integer chunk lengths summing to the seq extent of
    every input and target; not with valid_lengths."""
    if stream is None:
        return None
    if isinstance(stream, (str, bytes)) or not isinstance(stream, (list, tuple)) or not stream:
        raise CaptureError(f"stream={stream!r}: expected a non-empty list of chunk lengths")
    chunks = [integer(n, f"stream[{i}]", 1, INT64_MAX) for i, n in enumerate(stream)]
    for what, seq in seqs:
        if sum(chunks) != seq:
            raise CaptureError(f"stream chunks {chunks} sum to {sum(chunks)}, but the seq extent "
                               f"(axis 1) of {what} is {seq}")
    if isinstance(loss, CrossEntropyLoss):  # loader_steps.cpp: no [stream] with cross_entropy
        raise CaptureError("CrossEntropyLoss cannot be combined with stream")
    if loss is not None and loss.valid_lengths is not None:
        raise CaptureError("MSELoss valid_lengths cannot be combined with stream")
    return chunks


def check_arguments(inputs, loss, train_steps, lr, name, precisions, stream, seed, out):
    """Every argument of capture() but the model, mesh and plan (checked where they are read).
    Returns (precisions, stream) normalized to lists."""
    for i, x in enumerate(inputs):
        check_tensor(x, f"example input {i}", ids=True)
    if loss is not None and not isinstance(loss, LOSSES):
        raise CaptureError(f"loss={type(loss).__name__}: expected shardsim.capture.MSELoss, "
                           f"shardsim.capture.CrossEntropyLoss or None")
    if isinstance(loss, MSELoss):
        check_tensor(loss.target, "MSELoss target")
        check_valid_lengths(loss, loss.target.shape[0], loss.target.shape[1])
    elif isinstance(loss, CrossEntropyLoss):
        check_cross_entropy(loss)
    check_training(loss, train_steps, lr)
    if name is not None:
        if not isinstance(name, str) or not name or has_control_character(name):
            raise CaptureError(f"name={name!r}: expected a non-empty string without control "
                               f"characters (shardsim prints the scenario's name as it is)")
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            raise CaptureError(f"name={name!r}: not valid Unicode text") from None
    if seed is not None:
        integer(seed, "seed", 0, INT64_MAX)
    seqs = [(f"example input {i}", x.shape[1]) for i, x in enumerate(inputs)]
    if isinstance(loss, MSELoss):
        seqs.append(("the MSELoss target", loss.target.shape[1]))
    chunks = check_stream(stream, loss, seqs)
    if not isinstance(out, (str, os.PathLike)):
        raise CaptureError(f"out={out!r}: expected a directory path")
    if os.path.exists(out) and not os.path.isdir(out):
        raise CaptureError(f"out={os.fspath(out)!r} exists and is not a directory")
    return check_precisions(precisions), chunks
