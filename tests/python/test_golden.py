"""The Python golden reader (shardsim.golden) and the worked LayerNorm example
(examples/golden_example.py); ctest python:golden.

    PYTHONPATH=python SHARDSIM_BINARY=build/shardsim SHARDSIM_SOURCE_DIR=. \
        /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/python/test_golden.py

Writes goldens with the shardsim binary into a temporary directory, then loads them with numpy
only. Runs with Debian's /usr/bin/python3, which has python3-numpy (tools/bootstrap installs it).
"""

import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

try:
    import numpy as np
except ImportError:
    raise ImportError(f"{sys.executable} has no numpy: install python3-numpy (tools/bootstrap "
                      f"does)") from None

import shardsim.golden as sg

# conftest.py checks that ctest's environment names both (tests/CMakeLists.txt).
SHARDSIM, SOURCE = os.environ["SHARDSIM_BINARY"], os.environ["SHARDSIM_SOURCE_DIR"]

LAYERNORM = os.path.join(SOURCE, "scenarios", "layernorm_sequence_sharded.toml")
TRAIN = os.path.join(SOURCE, "scenarios", "layernorm_train_sequence_sharded.toml")
STREAM = os.path.join(SOURCE, "scenarios", "attention_stream_cp1.toml")
ZIGZAG = os.path.join(SOURCE, "scenarios", "attention_sequence_sharded_ulysses.toml")
IDS = os.path.join(SOURCE, "scenarios", "lm_tied_embedding_tp2.toml")
LABELS_FILE = os.path.join(SOURCE, "scenarios", "lm_ce_ignored_tokens_counted_clean.toml")


def shardsim(*args):
    result = subprocess.run([SHARDSIM, *args], capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"shardsim {' '.join(args)} exited {result.returncode}: {result.stderr}")
    return result.stdout


class GoldenPythonTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="shardsim_py_")
        cls.st_dir = os.path.join(cls.tmp.name, "st")
        cls.npy_dir = os.path.join(cls.tmp.name, "npy")
        cls.train_dir = os.path.join(cls.tmp.name, "train")
        cls.stream_dir = os.path.join(cls.tmp.name, "stream")
        shardsim("run", "--quiet", LAYERNORM, "--golden", cls.st_dir)
        shardsim("run", "--quiet", LAYERNORM, "--golden", cls.npy_dir, "--format", "npy")
        shardsim("run", "--quiet", TRAIN, "--golden", cls.train_dir, "--reference", "mp128",
                 "--dtype", "f64")
        shardsim("run", "--quiet", STREAM, "--precision", "f64", "--golden", cls.stream_dir,
                 "--reference", "f64", "--dtype", "f64")
        cls.zigzag_dir = os.path.join(cls.tmp.name, "zigzag")
        shardsim("run", "--quiet", ZIGZAG, "--precision", "f64", "--golden", cls.zigzag_dir,
                 "--reference", "f64", "--dtype", "f64")
        cls.st = sg.load(cls.st_dir)
        cls.npy = sg.load(cls.npy_dir)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_safetensors_and_npy_hold_the_same_goldens(self):
        self.assertEqual(sorted(self.st.tensors), sorted(self.npy.tensors))
        for name, t in self.st.tensors.items():
            other = self.npy.tensors[name].array
            self.assertEqual(t.array.dtype, other.dtype, name)
            self.assertEqual(t.array.tobytes(), other.tobytes(), name)

    def test_manifest_records_the_scenario_and_precision(self):
        m = self.st.manifest
        with open(LAYERNORM, "rb") as f:
            text = f.read()
        self.assertEqual(m["scenario"]["sha256"], hashlib.sha256(text).hexdigest())
        self.assertEqual(m["scenario"]["text"].encode(), text)
        self.assertEqual((m["precision"], m["significand_bits"]), ("mp256", 257))
        self.assertEqual(self.st.metadata["scenario"], "layernorm_sequence_sharded")

    def test_shards_are_slices_of_the_global_value(self):
        # y is an exact boundary (Shard(seq), whole token rows per rank): bitwise equal slices.
        y = self.st.get("s1/c1/y")
        shards = self.st.names("f64/s1/c1/y@rank")
        self.assertEqual(len(shards), 4)
        rank3 = self.st.tensor("f64/s1/c1/y@rank3[seq=12:13]")
        self.assertEqual((rank3.rank, rank3.slice, rank3.offset), (3, "seq=12:13", {"seq": 12}))
        self.assertEqual(rank3.array.shape, (2, 1, 16))
        for name in shards:
            t = self.st.tensor(name)
            np.testing.assert_array_equal(t.array, y[t.global_slices()])

    def test_zigzag_shards_are_their_two_runs_of_the_global_value(self):
        # 13 tokens over 2 ranks, zigzag: rank 0 holds seq [0:4)+[12:13), rank 1 [4:12)
        # (README "Placements"); y is exact (ulysses), so each shard equals the global rows.
        z = sg.load(self.zigzag_dir)
        y = z.get("s1/c1/y", "f64")
        rank0 = z.tensor("f64/s1/c1/y@rank0[seq=0:4+12:13]")
        self.assertEqual((rank0.offset, rank0.runs), ({"seq": 0}, {"seq": [[0, 4], [12, 13]]}))
        np.testing.assert_array_equal(rank0.array[:, 4, :], y[:, 12, :])
        for name in z.names("f64/s1/c1/y@rank"):
            t = z.tensor(name)
            np.testing.assert_array_equal(t.array, y[t.global_slices()])

    def test_token_ids_and_labels_are_i64_goldens(self):
        # Labels read from an npy file (with -100 for ignored tokens): the golden is that file's
        # content, as I64, read here by numpy alone; on tp 2 each rank holds a Replicate copy.
        d = os.path.join(self.tmp.name, "labels")
        shardsim("run", "--quiet", LABELS_FILE, "--precision", "f64", "--golden", d,
                 "--reference", "f64", "--dtype", "f64", "--format", "npy")
        g = sg.load(d)
        labels = g.get("inputs/labels", "f64")  # found under i64/ whatever the dtype asked
        self.assertEqual(labels.dtype, np.int64)
        expected = np.load(os.path.join(SOURCE, "scenarios", "data", "lm_labels_ignored.npy"))
        np.testing.assert_array_equal(labels, expected)
        self.assertEqual(int((labels == -100).sum()), 5)
        t = g.tensor("i64/inputs/labels")
        self.assertEqual(t.array.dtype, np.int64)
        for name in g.names("i64/inputs/labels@rank"):
            np.testing.assert_array_equal(g.tensor(name).array, expected)
        # shardsim compare reads them back (its C++ reader) and judges ids exactly: the goldens
        # against themselves pass; one label changed by 1 fails, naming the tensor.
        shardsim("compare", d, d)
        candidate = os.path.join(self.tmp.name, "labels_candidate")
        shutil.copytree(d, candidate)
        path = os.path.join(candidate, "i64__inputs__labels.npy")
        changed = np.load(path)
        changed[0, 0] += 1
        np.save(path, changed)
        result = subprocess.run([SHARDSIM, "compare", d, candidate], capture_output=True,
                                text=True)
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertIn("i64/inputs/labels", result.stdout)
        # dp 2 x tp 2: the ids are Shard(batch) on dp; every rank's shard is its rows.
        d = os.path.join(self.tmp.name, "ids")
        shardsim("run", "--quiet", IDS, "--precision", "f64", "--golden", d, "--reference", "f64",
                 "--dtype", "f64")
        g = sg.load(d)
        ids = g.get("inputs/ids")
        self.assertEqual((ids.dtype, ids.shape), (np.int64, (4, 6)))
        self.assertTrue(((ids >= 0) & (ids < 97)).all())
        shards = g.names("i64/inputs/ids@rank")
        self.assertEqual(len(shards), 4)
        for name in shards:
            t = g.tensor(name)
            self.assertEqual(t.array.shape, (2, 6))
            np.testing.assert_array_equal(t.array, ids[t.global_slices()])
        boundary = next(b for b in g.manifest["boundaries"] if b["tensor"] == "ids")
        self.assertEqual((boundary["kind"], boundary["op"]), ("input", "input"))

    def test_f32_goldens_are_the_f64_values_rounded_once(self):
        # Both are the mp256 value rounded once; f32(f64 value) can differ only by double
        # rounding, which needs the mp value within 2^-53 of an f32 midpoint: at most 1 ulp.
        y64, y32 = self.st.get("s1/c1/y", "f64"), self.st.get("s1/c1/y", "f32")
        self.assertEqual(y32.dtype, np.float32)
        self.assertLessEqual(int(sg.ulp_distance(y64.astype(np.float32), y32).max()), 1)

    def test_ulp_known_answers(self):
        one = np.float32(1)
        next_one = np.nextafter(one, np.float32(2))
        d = sg.ulp_distance(np.float32([next_one, -0.0, np.nan]), np.float32([one, 0.0, 1]))
        self.assertEqual(d.tolist(), [1, 0, np.iinfo(np.uint64).max])
        # 2.0 = 0x4000000000000000 and -2.0 map to +-2^62: 2^63 apart.
        self.assertEqual(int(sg.ulp_distance(np.float64([2.0]), np.float64([-2.0]))[0]), 2 ** 63)
        # The smallest subnormals on either side of zero are 2 apart (+-0 count once).
        tiny = np.float32(1e-45)
        self.assertEqual(int(sg.ulp_distance(np.float32([tiny]), np.float32([-tiny]))[0]), 2)

    def test_compare_rule(self):
        golden = self.st.get("s1/c1/y", "f32")
        bumped = golden.copy()
        bumped[1, 12, 5] = np.float32(bumped[1, 12, 5]) + 3 * np.spacing(np.abs(bumped[1, 12, 5]))
        self.assertTrue(sg.compare(golden, golden, rtol=0, atol=0)["ok"])
        self.assertFalse(sg.compare(bumped, golden, max_ulp=2)["ok"])
        result = sg.compare(bumped, golden, max_ulp=3)
        self.assertTrue(result["ok"])
        self.assertEqual(result["worst"], (1, 12, 5))
        with self.assertRaisesRegex(AssertionError, r"worst \[batch=1, seq=12, hidden=5\]"):
            sg.assert_close(bumped, golden, rtol=0, atol=0, max_ulp=2, name="y",
                            axes=["batch", "seq", "hidden"])
        nan = golden.copy()
        nan[0, 0, 0] = np.nan
        self.assertEqual(sg.compare(nan, golden, max_ulp=10 ** 9)["outside"], 1)
        inf = np.float64([np.inf, -np.inf])
        self.assertTrue(sg.compare(inf, inf)["ok"])
        self.assertFalse(sg.compare(inf[::-1].copy(), inf)["ok"])

    def test_hostile_safetensors_are_rejected(self):
        with open(os.path.join(self.st_dir, "goldens.safetensors"), "rb") as f:
            good = f.read()
        (n,) = struct.unpack("<Q", good[:8])
        header = json.loads(good[8:8 + n])
        cases = {
            "truncated": good[:-3],
            "header past end": struct.pack("<Q", len(good)) + good[8:],
            "duplicate": struct.pack("<Q", 21) + b'{"a":null,"a":null}  ',
        }
        name = next(k for k in header if k != "__metadata__")
        bad = dict(header)
        bad[name] = dict(bad[name], data_offsets=[1, bad[name]["data_offsets"][1] + 1])
        text = json.dumps(bad).encode()
        cases["overlap/hole"] = struct.pack("<Q", len(text)) + text + good[8 + n:]
        for what, data in cases.items():
            path = os.path.join(self.tmp.name, "bad.safetensors")
            with open(path, "wb") as f:
                f.write(data)
            with self.assertRaises(sg.GoldenFormatError, msg=what):
                sg.read_safetensors(path)

    def test_npy_data_is_64_byte_aligned(self):
        for info in self.npy.manifest["tensors"]:
            with open(os.path.join(self.npy_dir, info["file"]), "rb") as f:
                head = f.read(10)
            self.assertEqual(head[:8], b"\x93NUMPY\x01\x00")
            (length,) = struct.unpack("<H", head[8:10])
            self.assertEqual((10 + length) % 64, 0, info["file"])

    def test_training_goldens(self):
        g = sg.load(self.train_dir)
        self.assertEqual(g.manifest["dtypes"], ["f64"])
        self.assertEqual(g.get("s1/c1/loss").shape, ())
        # The per-rank Partial shares (#1) sum to the all-reduced gradient.
        shares = [g[f"f64/s1/c1/grad(ln.weight)#1@rank{r}[partial]"] for r in range(4)]
        reduced = g.get("s1/c1/grad(ln.weight)")
        np.testing.assert_allclose(sum(shares), reduced, rtol=1e-12, atol=0)
        self.assertEqual(g.tensor("f64/s1/c1/grad(ln.weight)").placement, "Replicate")

    def test_manifest_digest_covers_every_byte(self):
        # Any edit of the metadata (here a placement) without recomputing manifest_sha256 is
        # refused, like shardsim compare refuses it.
        with open(os.path.join(self.st_dir, "manifest.json"), "rb") as f:
            raw = f.read()
        self.assertEqual(sg.manifest_digest(raw, self.st.manifest["manifest_sha256"]),
                         self.st.manifest["manifest_sha256"])
        edited = os.path.join(self.tmp.name, "edited")
        os.makedirs(edited, exist_ok=True)
        with open(os.path.join(edited, "manifest.json"), "wb") as f:
            f.write(raw.replace(b'"placement": "Shard(seq)"', b'"placement": "Replicate"', 1))
        os.link(os.path.join(self.st_dir, "goldens.safetensors"), os.path.join(edited, "goldens.safetensors"))
        with self.assertRaisesRegex(sg.GoldenFormatError, "manifest_sha256"):
            sg.load(edited)

    def test_safetensors_header_says_what_the_manifest_says(self):
        # The header's __metadata__ edited (the precision) or a tensor added: the manifest's
        # digest still holds, so only the header check refuses it, as shardsim compare does.
        with open(os.path.join(self.st_dir, "goldens.safetensors"), "rb") as f:
            raw = f.read()
        n = struct.unpack("<Q", raw[:8])[0]
        header, data = json.loads(raw[8:8 + n]), raw[8 + n:]

        def rewritten(name, edit, tail=b""):
            edited = json.loads(json.dumps(header))
            edit(edited)
            text = json.dumps(edited).encode()
            out = os.path.join(self.tmp.name, name)
            os.makedirs(out, exist_ok=True)
            os.link(os.path.join(self.st_dir, "manifest.json"), os.path.join(out, "manifest.json"))
            with open(os.path.join(out, "goldens.safetensors"), "wb") as f:
                f.write(struct.pack("<Q", len(text)) + text + data + tail)
            return out

        unchanged = rewritten("same_header", lambda h: None)
        self.assertEqual(len(sg.load(unchanged).tensors), len(self.st.tensors))

        def precision(h):
            h["__metadata__"]["precision"] = "mp128"

        with self.assertRaisesRegex(sg.GoldenFormatError, "__metadata__ does not match"):
            sg.load(rewritten("meta", precision))
        def extra(h):  # one more F32 after the data
            h["extra"] = {"dtype": "F32", "shape": [1], "data_offsets": [len(data), len(data) + 4]}

        with self.assertRaisesRegex(sg.GoldenFormatError, "tensors, the manifest lists"):
            sg.load(rewritten("extra", extra, struct.pack("<f", 1.0)))

    def test_boundaries_carry_their_op_parameters(self):
        # The LayerNorm's keys with the defaults filled in (eps 1e-5 and axis hidden are defaults
        # of scenarios/layernorm_sequence_sharded.toml), on every tensor of its boundaries.
        y = self.st.tensor("f64/s1/c1/y")
        self.assertEqual((y.params["eps"], y.params["axis"], y.params["stats"]), (1e-5, "hidden", None))
        self.assertEqual(self.st.tensor("f64/s1/c1/y@rank3[seq=12:13]").params, y.params)
        self.assertIsNone(self.st.tensor("f64/inputs/x").params)
        # A parameter update carries the learning rate (the scenario's default 0.1).
        g = sg.load(self.train_dir)
        self.assertEqual(g.tensor("f64/s1/c1/ln.weight").params, {"learning_rate": 0.1})

    def test_streamed_inputs_are_global_and_chunks_are_slices(self):
        g = sg.load(self.stream_dir)
        x = g.get("inputs/x")
        self.assertEqual(x.shape, (2, 14, 8))  # the whole sequence, chunks 5, 3, 6
        for chunk, (begin, end) in enumerate([(0, 5), (5, 8), (8, 14)], start=1):
            np.testing.assert_array_equal(g.get(f"s1/c{chunk}/x"), x[:, begin:end, :])
        attention = g.tensor("f64/s1/c2/y").params
        self.assertEqual((attention["window"], attention["rope_theta"], attention["rope"]),
                         (4, 10000.0, "rotate_half"))

    def test_bf16_scalars_load(self):
        # A BF16 loss (shape []) widens to a 0-d float32 array (np.left_shift keeps it an array).
        out = os.path.join(self.tmp.name, "bf16_train")
        shardsim("run", "--quiet", TRAIN, "--golden", out, "--reference", "f64", "--dtype", "bf16")
        loss = sg.load(out).tensor("bf16/s1/c1/loss")
        self.assertEqual((loss.dtype, loss.array.shape, loss.array.dtype), ("BF16", (), np.float32))

    def test_command_line_errors_are_one_line_and_exit_2(self):
        for path in (os.path.join(self.tmp.name, "nope"), LAYERNORM):  # missing; a file
            result = subprocess.run([sys.executable, "-m", "shardsim.golden", path],
                                    capture_output=True, text=True)
            self.assertEqual((result.returncode, result.stdout), (2, ""), result.stderr)
            self.assertRegex(result.stderr, r"^shardsim.golden: error: .*: not a directory: "
                                            r"GOLDEN must be a directory[^\n]*\n$")
            with self.assertRaisesRegex(sg.GoldenFormatError, "not a directory"):
                sg.load(path)

    def edited(self, source, edit, name="edited_copy"):
        """A copy of golden directory `source` (data files hard-linked) whose manifest `edit`
        changed, its manifest_sha256 recomputed so that only the metadata checks can refuse it."""
        out = os.path.join(self.tmp.name, name)
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        for file in os.listdir(source):
            if file != "manifest.json":
                os.link(os.path.join(source, file), os.path.join(out, file))
        with open(os.path.join(source, "manifest.json")) as f:
            manifest = json.load(f)
        edit(manifest, out)
        text = json.dumps(manifest, indent=2) + "\n"
        digest = manifest["manifest_sha256"]
        digest_of = hashlib.sha256(text.replace(digest, "0" * 64).encode()).hexdigest()
        with open(os.path.join(out, "manifest.json"), "w") as f:
            f.write(text.replace(digest, digest_of))
        return out

    def test_edited_metadata_is_refused_naming_the_key(self):
        # What `shardsim compare` refuses (manifest_reader.cpp, reader.cpp), with the digest
        # recomputed: each edit alone, on the shard y@rank3 (index i) or the root.
        shard = "f64/s1/c1/y@rank3[seq=12:13]"
        outside = os.path.join(self.tmp.name, "outside.npy")  # the same bytes, outside the dir
        shutil.copy(os.path.join(self.npy_dir, self.npy.tensor(shard).info["file"]), outside)
        cases = [("file", "../outside.npy", r"\.file: '\.\./outside\.npy' must be a plain file"),
                 ("file", outside, r"\.file: '/.*' must be a plain file name"),
                 ("dtype", "F32", r"goldens.safetensors: tensor '.*' is F64, the manifest says "
                                  r"F32"),
                 ("offset", {"seq": 11}, r"\.offset: expected \{\"seq\": 12\} for Shard\(seq\)"),
                 ("slice", "seq=11:13", r"\.slice: expected 'seq=12:13'"),
                 ("rank", -1, r"\.rank: rank out of range"),
                 ("rank", 2, r"\.shape: does not match \[batch=2, seq=4, hidden=16\]"),
                 ("placement", "Shard(seq", r"\.placement: invalid placement 'Shard\(seq'"),
                 ("placement", "Shard(seq, balanced)", r"\.shape: does not match"),
                 ("axes", ["batch", "hidden", "seq"], r"\.global_shape: its axes .* not the "
                                                      r"tensor's"),
                 ("ranks", [], r"\.ranks: does not match the extents Shard\(seq\) gives"),
                 (None, ("storage", "zip"), r"manifest.json: storage: expected safetensors or npy")]
        for key, value, message in cases:
            def edit(m, out, key=key, value=value):
                if key is None:
                    m[value[0]] = value[1]
                    return
                next(t for t in m["tensors"] if t["name"] == shard)[key] = value
            source = self.npy_dir if key == "file" else self.st_dir
            with self.subTest(key=key, value=value):
                with self.assertRaisesRegex(sg.GoldenFormatError, message):
                    sg.load(self.edited(source, edit, "metadata_edit"))

    def test_npy_goldens_are_read_strictly(self):
        def tail(m, out):  # 8 trailing bytes after y's data: compare refuses them
            with open(os.path.join(out, "f64__s1__c1__y.npy"), "rb") as f:
                data = f.read()
            os.unlink(os.path.join(out, "f64__s1__c1__y.npy"))
            with open(os.path.join(out, "f64__s1__c1__y.npy"), "wb") as f:
                f.write(data + bytes(8))
        with self.assertRaisesRegex(sg.GoldenFormatError, r"y.npy: shape/size mismatch: .*"
                                                          r"\(trailing bytes\)"):
            sg.load(self.edited(self.npy_dir, tail))
        def missing(m, out):
            os.unlink(os.path.join(out, "f64__s1__c1__y.npy"))
        with self.assertRaisesRegex(sg.GoldenFormatError, r"manifest.json: tensors\[\d+\]\.file: "
                                                          r".*y.npy: cannot open: No such file"):
            sg.load(self.edited(self.npy_dir, missing))

    def test_worked_layernorm_example(self):
        for directory in (self.st_dir, self.npy_dir):
            result = subprocess.run([sys.executable, os.path.join(SOURCE, "examples",
                                                                  "golden_example.py"),
                                     directory], capture_output=True, text=True)
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertIn("checks passed", result.stdout)
