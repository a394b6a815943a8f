#pragma once
/// @file validate.hpp
/// @brief Building blocks of argument validation, shared by every module's API header.
///
/// An op's validate_*_args function checks shapes, pointers and strides before any
/// launch and throws course::InvalidArgument (require_arg, error.hpp) naming the argument,
/// its value and the rule. The checks that recur across ops live here:
///   - msg(...):              the rule's text as pieces ("must be >= K = ", 64), formatted
///                            only if the check fails;
///   - Dim, max_offset, span_bytes: the extent of a strided tensor (one Dim per index);
///   - require_injective:     distinct indices must reach distinct elements (outputs);
///   - ranges_intersect, matrices_overlap: does an output overlap another operand;
///   - require_stride, require_row_stride: the stride rules (>= 0, multiple of a vector
///     width, a row stride that clears its row).
/// Strides and offsets are in ELEMENTS, sizes in bytes only where the name says so.

#include "course/error.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

namespace course::validate {

/// The text of its arguments, streamed one after the other when it is printed, not before:
/// require_arg(ld >= K, fn, "lda", ld, msg("must be >= K = ", K)) formats nothing unless
/// ld < K (course::Msg, error.hpp). Where an std::string is needed, Msg::str() makes one.
template <class... Parts>
Msg<std::decay_t<const Parts>...> msg(const Parts&... parts) {
  return Msg<std::decay_t<const Parts>...>(parts...);
}

/// One index of a strided tensor: it adds (0 .. extent-1) * stride elements to the offset.
/// `name` is the argument that holds the stride, for messages ("o_strides.seq").
struct Dim {
  std::int64_t extent;
  std::int64_t stride;
  const char* name;
};

/// Largest element offset the dims reach (extents >= 1, strides >= 0).
inline std::int64_t max_offset(const std::vector<Dim>& dims) {
  std::int64_t off = 0;
  for (const Dim& d : dims) off += (d.extent - 1) * d.stride;
  return off;
}

/// Bytes from the first to one past the last element of a strided tensor of T.
template <class T>
std::size_t span_bytes(const std::vector<Dim>& dims) {
  return static_cast<std::size_t>(max_offset(dims) + 1) * sizeof(T);
}

/// True if the byte ranges [p, p + bytes_p) and [q, q + bytes_q) intersect.
inline bool ranges_intersect(const void* p, std::size_t bytes_p, const void* q, std::size_t bytes_q) {
  const auto a = reinterpret_cast<std::uintptr_t>(p), b = reinterpret_cast<std::uintptr_t>(q);
  return a < b + bytes_q && b < a + bytes_p;
}

/// Throws unless distinct indices of `dims` map to distinct offsets (an output must not
/// write one element twice). The test: sort the dims (extent > 1) by stride; each stride
/// must exceed the largest offset the smaller strides reach. That holds for every dense,
/// padded or permuted layout ([B,H,N,d], [B,N,H,d], padded rows) and rules out any
/// aliasing; exotic interleavings that happen to be injective are rejected too
/// (conservative). `what` names the tensor in the message ("o", "C").
inline void require_injective(std::vector<Dim> dims, const char* fn, const char* what) {
  dims.erase(std::remove_if(dims.begin(), dims.end(), [](const Dim& d) { return d.extent <= 1; }), dims.end());
  std::stable_sort(dims.begin(), dims.end(), [](const Dim& x, const Dim& y) { return x.stride < y.stride; });
  std::int64_t reach = 0;
  for (const Dim& d : dims) {
    if (d.stride <= reach)
      require_arg(false, fn, d.name, d.stride,
                  msg("makes two elements of ", what, " share an address: with extent ", d.extent, " it must be > ",
                      reach, ", the largest offset reached by the dimensions with smaller strides"));
    require_arg(d.extent - 1 <= (std::numeric_limits<std::int64_t>::max() - reach) / d.stride, fn, d.name, d.stride,
                "makes the offsets overflow int64");
    reach += (d.extent - 1) * d.stride;
  }
}

/// Do two rows x cols matrices with row stride ld (>= cols), starting `delta` elements
/// apart, share an element? Only if delta = dr*ld + dc with |dr| <= rows-1 and
/// |dc| <= cols-1. Exact, O(1): for matrices that do not come from one strided layout
/// (pointer arrays), where require_injective does not apply.
inline bool matrices_overlap(std::int64_t delta, std::int64_t rows, std::int64_t cols, std::int64_t ld) {
  if (delta < 0) delta = -delta;  // the set of such deltas is symmetric
  const std::int64_t q = delta / ld;
  for (std::int64_t dr : {q, q + 1}) {
    dr = std::min(dr, rows - 1);  // the nearest allowed row offset
    const std::int64_t dc = delta - dr * ld;
    if (dc <= cols - 1 && dc >= -(cols - 1)) return true;
  }
  return false;
}

/// Throws unless the element stride `stride` (argument `name`) is >= 0 and, when
/// `multiple` > 1, a multiple of it; `why` gives the reason for the multiple
/// ("every row must start 16-byte aligned (float4 / cp.async loads)").
inline void require_stride(std::int64_t stride, const char* fn, const char* name, std::int64_t multiple = 1,
                           const char* why = "") {
  require_arg(stride >= 0, fn, name, stride,
              "must be >= 0 (strides are in elements; negative strides are not supported)");
  if (multiple > 1)
    require_arg(stride % multiple == 0, fn, name, stride, msg("must be a multiple of ", multiple, ": ", why));
}

/// Throws unless the row stride `ld` (argument `name`) clears a row of `cols` elements:
/// ld >= cols. The message reads "must be >= <cols_name> = <cols> (<why>)", e.g.
/// "must be >= K = 64 (A is M x K, row-major)".
inline void require_row_stride(std::int64_t ld, std::int64_t cols, const char* cols_name, const char* fn,
                               const char* name, const char* why) {
  require_arg(ld >= cols, fn, name, ld, msg("must be >= ", cols_name, " = ", cols, " (", why, ")"));
}

}  // namespace course::validate
