// The on-disk formats shardsim reads and writes for golden tensors, as constants. docs/goldens.md
// ("Golden file formats") describes the same layout in prose; keep the two in step.
//
// safetensors (https://github.com/huggingface/safetensors, "Format"):
//
//   offset 0   u64 little-endian N: the byte length of the JSON header
//   offset 8   N bytes of UTF-8 JSON: one object,
//                "__metadata__": {string: string, ...}            (optional)
//                NAME: {"dtype": DTYPE, "shape": [d0, d1, ...],
//                       "data_offsets": [BEGIN, END]}            (one per tensor)
//              The writer pads the header with trailing spaces (0x20) so that 8 + N is a
//              multiple of kHeaderAlignment.
//   offset 8+N the data section: each tensor's bytes, row-major, little-endian, at
//              [BEGIN, END) relative to the start of the data section. Sorted by BEGIN, the
//              ranges tile the section exactly: the first begins at 0, each begins where the
//              previous ended, the last ends at the end of the file. END - BEGIN equals
//              numel(shape) * size(DTYPE).
//
// npy (numpy's NEP 1, "A simple file format for NumPy arrays"):
//
//   offset 0   the magic "\x93NUMPY", then major and minor version bytes
//   offset 8   header length H: u16 little-endian for version 1.0, u32 for 2.0 and 3.0
//   then       H bytes of an ASCII (3.0: UTF-8) Python dict literal
//                {'descr': '<f8', 'fortran_order': False, 'shape': (2, 13, 16), }
//              padded with spaces and ended by '\n'; the writer makes the data start at a
//              multiple of kNpyAlignment
//   then       the data, numel(shape) * itemsize bytes, C order, nothing after it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace shardsim::format {

// ---- safetensors ----
inline constexpr std::size_t kHeaderLengthBytes = 8;
inline constexpr std::size_t kHeaderAlignment = 8;
// The reference implementation refuses headers above 100 MB; so do we, before allocating.
inline constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;
// JSON nesting deeper than this is rejected (a valid header nests 3 levels).
inline constexpr int kMaxHeaderDepth = 16;
inline constexpr std::string_view kMetadataKey = "__metadata__";
inline constexpr std::string_view kDtypeKey = "dtype";
inline constexpr std::string_view kShapeKey = "shape";
inline constexpr std::string_view kOffsetsKey = "data_offsets";

// Element types. `safetensors` is the header's dtype string, `npy` the little-endian numpy
// descr. Everything but BOOL and the integers can be compared numerically; all of them convert
// exactly to double except 64-bit integers beyond 2^53.
enum class Dtype { boolean, u8, i8, u16, i16, u32, i32, u64, i64, f16, bf16, f32, f64 };

struct DtypeInfo {
  Dtype dtype;
  std::string_view safetensors;  // "F32"
  std::string_view npy;          // "<f4" ("|u1" for one-byte types)
  std::size_t size;              // bytes per element
  bool is_float;
};

inline constexpr DtypeInfo kDtypes[] = {
    {Dtype::boolean, "BOOL", "|b1", 1, false}, {Dtype::u8, "U8", "|u1", 1, false},
    {Dtype::i8, "I8", "|i1", 1, false},        {Dtype::u16, "U16", "<u2", 2, false},
    {Dtype::i16, "I16", "<i2", 2, false},      {Dtype::u32, "U32", "<u4", 4, false},
    {Dtype::i32, "I32", "<i4", 4, false},      {Dtype::u64, "U64", "<u8", 8, false},
    {Dtype::i64, "I64", "<i8", 8, false},      {Dtype::f16, "F16", "<f2", 2, true},
    {Dtype::bf16, "BF16", "", 2, true},        {Dtype::f32, "F32", "<f4", 4, true},
    {Dtype::f64, "F64", "<f8", 8, true},
};

inline const DtypeInfo& dtype_info(Dtype dtype) {
  for (const DtypeInfo& info : kDtypes) {
    if (info.dtype == dtype) return info;
  }
  return kDtypes[0];  // unreachable: every enumerator has a row
}

inline std::optional<Dtype> dtype_from_safetensors(std::string_view name) {
  for (const DtypeInfo& info : kDtypes) {
    if (info.safetensors == name) return info.dtype;
  }
  return std::nullopt;
}

// ---- npy ----
inline constexpr std::string_view kNpyMagic = "\x93NUMPY";
inline constexpr std::size_t kNpyPreambleV1 = 10;  // magic, version, u16 header length
inline constexpr std::size_t kNpyPreambleV2 = 12;  // magic, version, u32 header length
inline constexpr std::size_t kNpyAlignment = 64;
// numpy refuses headers longer than this by default (np.lib.format._MAX_HEADER_SIZE).
inline constexpr std::size_t kNpyMaxHeaderBytes = 10000;

// ---- golden directory ----
inline constexpr std::string_view kGoldenSafetensorsFile = "goldens.safetensors";
inline constexpr std::string_view kManifestFile = "manifest.json";
inline constexpr std::string_view kManifestFormat = "shardsim-goldens";
inline constexpr int kManifestFormatVersion = 2;

}  // namespace shardsim::format
