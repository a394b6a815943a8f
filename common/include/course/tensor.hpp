#pragma once
/// @file tensor.hpp
/// @brief Host tensors with a shape and strides (in elements), for references and tests.
///
/// A HostTensor owns a flat vector and views it through `shape` and `strides`:
/// element (i0, i1, ...) lives at storage offset `sum_k i_k * strides[k]`.
/// Attention tensors are always *indexed* as [B, H, N, d]; their *storage* is
/// either [B,H,N,d] (heads outer) or [B,N,H,d] (as a fused QKV projection
/// writes it), which only changes the strides.

#include "course/error.hpp"

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace course {

using Shape = std::vector<std::int64_t>;

/// Row-major (C-order) strides of `shape`.
Shape contiguous_strides(const Shape& shape);
/// Number of elements of `shape` (1 for a scalar, 0 if any extent is 0).
std::int64_t numel(const Shape& shape);
/// "[2, 3, 4]"
std::string shape_string(const Shape& shape);

/// Storage orders of a 4-D attention tensor, indexed as [B, H, N, d].
enum class AttentionLayout {
  BHND,  ///< heads outer: each head's [N, d] matrix is contiguous
  BNHD,  ///< sequence outer: one token's H*d values are contiguous (fused QKV output)
};
const char* to_string(AttentionLayout layout);

template <class T>
class HostTensor {
 public:
  HostTensor() = default;
  /// Contiguous tensor of `shape`, zero-filled.
  explicit HostTensor(Shape shape) : HostTensor(shape, contiguous_strides(shape)) {}
  /// Tensor of `shape` with explicit `strides`; storage is sized to hold the
  /// largest offset the strides reach (so padded rows are allowed).
  HostTensor(Shape shape, Shape strides);
  /// A [B, H, N, d] tensor stored in `layout`.
  static HostTensor attention(std::int64_t B, std::int64_t H, std::int64_t N, std::int64_t d,
                              AttentionLayout layout);

  const Shape& shape() const noexcept { return shape_; }
  const Shape& strides() const noexcept { return strides_; }
  std::int64_t dim(int k) const { return shape_.at(static_cast<std::size_t>(k)); }
  std::int64_t stride(int k) const { return strides_.at(static_cast<std::size_t>(k)); }
  int rank() const noexcept { return static_cast<int>(shape_.size()); }
  std::int64_t numel() const { return course::numel(shape_); }

  /// Flat storage (what a device buffer uploads and downloads).
  std::vector<T>& storage() noexcept { return data_; }
  const std::vector<T>& storage() const noexcept { return data_; }
  T* data() noexcept { return data_.data(); }
  const T* data() const noexcept { return data_.data(); }

  /// Storage offset of a multi-index; bounds-checked (throws InvalidArgument).
  std::int64_t offset(std::initializer_list<std::int64_t> idx) const;
  std::int64_t offset(const std::vector<std::int64_t>& idx) const;
  T& operator()(std::initializer_list<std::int64_t> idx) { return data_[offset(idx)]; }
  const T& operator()(std::initializer_list<std::int64_t> idx) const { return data_[offset(idx)]; }
  T& at(const std::vector<std::int64_t>& idx) { return data_[offset(idx)]; }
  const T& at(const std::vector<std::int64_t>& idx) const { return data_[offset(idx)]; }

  /// Multi-index of the `linear`-th element in row-major logical order.
  std::vector<std::int64_t> unravel(std::int64_t linear) const;

  /// Calls f(multi_index) for every logical element, row-major.
  template <class F>
  void for_each_index(F&& f) const {
    const std::int64_t n = numel();
    for (std::int64_t i = 0; i < n; ++i) f(unravel(i));
  }

  /// A copy with contiguous row-major storage and the same logical values.
  HostTensor contiguous() const;
  /// A copy converted element-wise to U, same shape and strides.
  template <class U>
  HostTensor<U> cast() const {
    HostTensor<U> out(shape_, strides_);
    for (std::size_t i = 0; i < data_.size(); ++i) out.storage()[i] = static_cast<U>(data_[i]);
    return out;
  }

 private:
  Shape shape_;
  Shape strides_;
  std::vector<T> data_;
};

extern template class HostTensor<float>;
extern template class HostTensor<double>;

}  // namespace course
