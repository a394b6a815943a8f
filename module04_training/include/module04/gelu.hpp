#pragma once
/// @file gelu.hpp
/// @brief Module 4 API: GELU in GPT-2's tanh approximation, forward and backward, fp32 or
/// bf16, as a ladder of steps.
///
///     y  = gelu(x) = x/2 * (1 + tanh(u)),         u = sqrt(2/pi) * (x + 0.044715 x^3)
///     dx = dy * gelu'(x),  gelu'(x) = (1 + tanh u)/2 + x/2 * (1 - tanh^2 u) * du/dx,
///                          du/dx = sqrt(2/pi) * (1 + 3 * 0.044715 x^2)
/// (torch.nn.functional.gelu(x, approximate='tanh'); CPU references course::ref::gelu_tanh
/// and gelu_tanh_backward.) With accumulate, the backward adds: dx += dy * gelu'(x) (a
/// residual branch's gradient arriving in the same buffer).
///
/// The same function in another form: (1 + tanh u)/2 = sigmoid(2u) = 1 / (1 + exp(-2u)),
/// so gelu(x) = x * sigmoid(2u) and gelu'(x) = s (1 + 2 x (1 - s) du/dx) with s = sigmoid(2u).
/// Step vectorized evaluates that form (one expf, no tanhf); see the solution for why it is
/// also the more accurate one.
///
/// ## Contract (checked by validate_gelu_args / validate_gelu_backward_args before any launch)
/// - n in [0, 2^40]: n contiguous elements of dtype (fp32, or bf16 with fp32 arithmetic and
///   one rounding of each result); n = 0 is a no-op and the pointers may then be null.
/// - x, y (forward), x, dy, dx (backward) non-null and aligned to their element.
/// - In place is allowed: y == x (forward), dx == dy (backward, also with accumulate: then
///   dx = dy + dy * gelu'(x)). Any other overlap of an output with an input is rejected.
/// - No alignment beyond the element is required: vectorized uses 16-byte loads when every
///   pointer is 16-byte aligned and scalar loads otherwise (same answer, slower).

#include "course/error.hpp"
#include "course/impl.hpp"
#include "course/validate.hpp"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <iterator>

namespace course::m04 {

/// The GELU ladder, in teaching order.
enum class GeluStep {
  scalar,      ///< one element per thread, tanhf: the formula as written
  vectorized,  ///< 16-byte loads, 4 of them per thread per array; x * sigmoid(2u) with one expf
};

inline constexpr StepInfo<GeluStep> kGeluSteps[] = {
    {GeluStep::scalar, "scalar", "one element per thread, x/2 (1 + tanhf(u)): the formula as written"},
    {GeluStep::vectorized, "vectorized",
     "16-byte loads and stores, 4 per thread per array; x * sigmoid(2u) with one expf instead of tanhf"},
};
static_assert(steps_in_enum_order(kGeluSteps), "kGeluSteps must list GeluStep in enum order");

/// The step's name as in the table ("scalar"), "?" for a value outside it.
inline const char* step_name(GeluStep step) { return step_name_in(kGeluSteps, step); }

/// Element type of every tensor of one call.
enum class GeluDType { f32, bf16 };

inline constexpr double kGeluSqrt2OverPi = 0.7978845608028654;  ///< sqrt(2/pi)
inline constexpr double kGeluCubic = 0.044715;
inline constexpr std::int64_t kGeluMaxElements = std::int64_t{1} << 40;

/// y = gelu(x). Device pointers to n elements of dtype (float or __nv_bfloat16).
struct GeluArgs {
  const void* x = nullptr;
  void* y = nullptr;  ///< may equal x (in place)
  std::int64_t n = 0;
  GeluDType dtype = GeluDType::f32;
  cudaStream_t stream = nullptr;
};

/// dx = dy * gelu'(x), or dx += dy * gelu'(x) with accumulate.
struct GeluBackwardArgs {
  const void* x = nullptr;   ///< the forward's input
  const void* dy = nullptr;  ///< dL/dy
  void* dx = nullptr;        ///< dL/dx; may equal dy (in place)
  std::int64_t n = 0;
  GeluDType dtype = GeluDType::f32;
  bool accumulate = false;   ///< add to dx instead of overwriting it
  cudaStream_t stream = nullptr;
};

inline std::size_t gelu_element_bytes(GeluDType dtype) { return dtype == GeluDType::bf16 ? 2 : 4; }

namespace gelu_detail {

inline void check_common(int step, GeluDType dtype, std::int64_t n, const char* fn) {
  require_arg(step >= 0 && step < static_cast<int>(std::size(kGeluSteps)), fn, "step", step, "is not a GeluStep");
  const int d = static_cast<int>(dtype);
  require_arg(d == 0 || d == 1, fn, "dtype", d, "must be GeluDType::f32 (0) or GeluDType::bf16 (1)");
  require_arg(n >= 0 && n <= kGeluMaxElements, fn, "n", n, "must be in [0, 2^40]");
}

inline void check_pointer(const void* p, GeluDType dtype, const char* fn, const char* name) {
  require_not_null(p, fn, name);
  require_aligned(p, gelu_element_bytes(dtype), fn, name);
}

}  // namespace gelu_detail

/// The validation both implementations run before any forward launch.
inline void validate_gelu_args(const GeluArgs& a, GeluStep step, const char* fn) {
  gelu_detail::check_common(static_cast<int>(step), a.dtype, a.n, fn);
  if (a.n == 0) return;
  gelu_detail::check_pointer(a.x, a.dtype, fn, "x");
  gelu_detail::check_pointer(a.y, a.dtype, fn, "y");
  const std::size_t bytes = static_cast<std::size_t>(a.n) * gelu_element_bytes(a.dtype);
  require_arg(a.y == a.x || !validate::ranges_intersect(a.y, bytes, a.x, bytes), fn, "y", a.y,
              "overlaps x; only the exact in-place case y == x is allowed");
}

/// The validation both implementations run before any backward launch.
inline void validate_gelu_backward_args(const GeluBackwardArgs& a, GeluStep step, const char* fn) {
  gelu_detail::check_common(static_cast<int>(step), a.dtype, a.n, fn);
  if (a.n == 0) return;
  gelu_detail::check_pointer(a.x, a.dtype, fn, "x");
  gelu_detail::check_pointer(a.dy, a.dtype, fn, "dy");
  gelu_detail::check_pointer(a.dx, a.dtype, fn, "dx");
  const std::size_t bytes = static_cast<std::size_t>(a.n) * gelu_element_bytes(a.dtype);
  require_arg(!validate::ranges_intersect(a.dx, bytes, a.x, bytes), fn, "dx", a.dx,
              "overlaps x (x is still needed); dx may only equal dy");
  require_arg(a.dx == a.dy || !validate::ranges_intersect(a.dx, bytes, a.dy, bytes), fn, "dx", a.dx,
              "overlaps dy; only the exact in-place case dx == dy is allowed");
}

}  // namespace course::m04

COURSE_DECLARE_FOR_BOTH_IMPLS(
    /// y = gelu_tanh(x), asynchronous on args.stream.
    void gelu_forward(::course::m04::GeluStep step, const ::course::m04::GeluArgs& args);
    /// dx (+)= dy * gelu_tanh'(x), asynchronous on args.stream.
    void gelu_backward(::course::m04::GeluStep step, const ::course::m04::GeluBackwardArgs& args);)
