#include "course/bf16.hpp"

namespace course {

std::vector<__nv_bfloat16> to_bf16(const std::vector<float>& x) {
  std::vector<__nv_bfloat16> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) out[i] = __float2bfloat16_rn(x[i]);
  return out;
}

std::vector<float> from_bf16(const std::vector<__nv_bfloat16>& x) {
  std::vector<float> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) out[i] = __bfloat162float(x[i]);
  return out;
}

std::vector<float> round_to_bf16(const std::vector<float>& x) { return from_bf16(to_bf16(x)); }

}  // namespace course
