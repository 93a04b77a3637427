// Tensor files: RawTensor (a tensor as a file holds it) and the two codecs, safetensors and npy.
// Hostile-input safe: the decoders check every length against the input before use.
//
// The file formats are in safetensors_format.hpp (constants) and docs/goldens.md ("Golden file
// formats"). Nothing here knows about runs, comparisons or golden sets (golden_set.hpp).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "io/safetensors_format.hpp"

namespace shardsim {

// ---------------------------------------------------------------------------------------------
// Raw tensors and the two codecs.

// A tensor as a file holds it: row-major, little-endian bytes.
// Invariant (after decode or build): bytes.size() == numel(shape) * dtype size.
struct RawTensor {
  std::string name;
  format::Dtype dtype = format::Dtype::f64;
  std::vector<std::int64_t> shape;
  std::string bytes;

  std::int64_t numel() const;
};

// Builds F32/F64/U8 tensors from values (little-endian). U8 values must be 0..255 integers.
// raw_bits16 builds a BF16 or F16 tensor from bit patterns (narrow.hpp).
RawTensor raw_f32(std::string name, std::vector<std::int64_t> shape, const std::vector<float>& v);
RawTensor raw_bits16(std::string name, format::Dtype dtype, std::vector<std::int64_t> shape,
                     const std::vector<std::uint16_t>& bits);
RawTensor raw_f64(std::string name, std::vector<std::int64_t> shape, const std::vector<double>& v);
RawTensor raw_u8(std::string name, std::vector<std::int64_t> shape, const std::vector<double>& v);
// I64 from integral doubles (token ids and labels: |v| < 2^53, exact).
RawTensor raw_i64(std::string name, std::vector<std::int64_t> shape, const std::vector<double>& v);

// Every element as a double: exact for all dtypes except 64-bit integers beyond 2^53.
std::vector<double> raw_values(const RawTensor& tensor);

struct SafetensorsFile {
  std::vector<RawTensor> tensors;              // in data order (ascending data_offsets)
  std::map<std::string, std::string> metadata;  // the "__metadata__" map
};

// The safetensors bytes of `tensors`, data in the given order, header keys in the same order
// after "__metadata__" (omitted when `metadata` is empty). Deterministic.
// REQUIRES: unique, non-empty names.
std::string encode_safetensors(const std::vector<RawTensor>& tensors,
                               const std::vector<std::pair<std::string, std::string>>& metadata);

// Parses a safetensors file. Never allocates more than the input's size plus bookkeeping; every
// length is checked against the input before use. Throws InputError("WHAT: ...") on anything
// that does not follow the format: a header length past the end, invalid JSON, duplicate names,
// an unknown dtype, a shape/size mismatch, offsets that overlap or leave holes, truncated data,
// non-string metadata values.
SafetensorsFile decode_safetensors(std::string_view bytes, const std::string& what);
// Reads and decodes the safetensors file `path` (a regular file, io.hpp): the header first, then,
// once every declared length matches the file's size, the data. So a file larger or smaller than
// its header declares (say /dev/zero behind a symlink, or 100 GB of trailing bytes) is refused
// before its data is read. Errors name the path.
SafetensorsFile read_safetensors(const std::string& path);

// npy format 1.0, header padded so the data starts at a multiple of 64 bytes. BF16 has no npy
// dtype: a BF16 tensor is written as '<u2' holding its bit patterns (docs/goldens.md "bf16 in
// npy"), and decode_npy reads it back as U16.
std::string encode_npy(const RawTensor& tensor);
// Parses npy versions 1.0, 2.0 and 3.0 (C order; little-endian, big-endian is byte-swapped).
// The returned tensor's name is empty. Throws InputError("WHAT: ...") like decode_safetensors.
RawTensor decode_npy(std::string_view bytes, const std::string& what);
// Reads and decodes the npy file `path` like read_safetensors: the preamble and header first, the
// data only once the file's size matches the header's shape.
RawTensor read_npy(const std::string& path);

// The .npy file name of golden tensor `name`: '/' becomes "__", and every byte outside
// [A-Za-z0-9._()[]=:@+#-] becomes %XX.
std::string npy_file_name(std::string_view name);

}  // namespace shardsim
