#include "course/tensor.hpp"

#include <algorithm>
#include <sstream>

namespace course {

Shape contiguous_strides(const Shape& shape) {
  Shape s(shape.size(), 1);
  for (int k = static_cast<int>(shape.size()) - 2; k >= 0; --k)
    s[k] = s[k + 1] * std::max<std::int64_t>(shape[k + 1], 1);
  return s;
}

std::int64_t numel(const Shape& shape) {
  std::int64_t n = 1;
  for (auto e : shape) n *= e;
  return n;
}

std::string shape_string(const Shape& shape) {
  std::ostringstream os;
  os << "[";
  for (std::size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

const char* to_string(AttentionLayout layout) {
  return layout == AttentionLayout::BHND ? "BHND" : "BNHD";
}

template <class T>
HostTensor<T>::HostTensor(Shape shape, Shape strides) : shape_(std::move(shape)), strides_(std::move(strides)) {
  require_arg(shape_.size() == strides_.size(), "HostTensor", "strides.size()", strides_.size(),
              "must equal shape.size()");
  std::int64_t max_offset = 0;
  for (std::size_t k = 0; k < shape_.size(); ++k) {
    require_arg(shape_[k] >= 0, "HostTensor", "shape", shape_string(shape_), "extents must be >= 0");
    require_arg(strides_[k] >= 0, "HostTensor", "strides", shape_string(strides_), "strides must be >= 0");
    if (shape_[k] > 0) max_offset += (shape_[k] - 1) * strides_[k];
  }
  data_.assign(course::numel(shape_) == 0 ? 0 : static_cast<std::size_t>(max_offset + 1), T{});
}

template <class T>
HostTensor<T> HostTensor<T>::attention(std::int64_t B, std::int64_t H, std::int64_t N, std::int64_t d,
                                       AttentionLayout layout) {
  for (auto [name, v] : {std::pair{"B", B}, {"H", H}, {"N", N}, {"d", d}})
    require_arg(v > 0, "HostTensor::attention", name, v, "must be > 0");
  if (layout == AttentionLayout::BHND) return HostTensor({B, H, N, d});
  // Storage [B, N, H, d], indexed [B, H, N, d].
  return HostTensor({B, H, N, d}, {N * H * d, d, H * d, 1});
}

template <class T>
std::int64_t HostTensor<T>::offset(const std::vector<std::int64_t>& idx) const {
  require_arg(idx.size() == shape_.size(), "HostTensor::offset", "index rank", idx.size(),
              "must equal the tensor rank");
  std::int64_t off = 0;
  for (std::size_t k = 0; k < idx.size(); ++k) {
    if (idx[k] < 0 || idx[k] >= shape_[k]) {
      std::ostringstream os;
      os << "index " << k << " must lie in [0, " << shape_[k] << ") for shape " << shape_string(shape_);
      require_arg(false, "HostTensor::offset", "index", idx[k], os.str().c_str());
    }
    off += idx[k] * strides_[k];
  }
  return off;
}

template <class T>
std::int64_t HostTensor<T>::offset(std::initializer_list<std::int64_t> idx) const {
  return offset(std::vector<std::int64_t>(idx));
}

template <class T>
std::vector<std::int64_t> HostTensor<T>::unravel(std::int64_t linear) const {
  std::vector<std::int64_t> idx(shape_.size(), 0);
  for (int k = static_cast<int>(shape_.size()) - 1; k >= 0; --k) {
    idx[k] = linear % shape_[k];
    linear /= shape_[k];
  }
  return idx;
}

template <class T>
HostTensor<T> HostTensor<T>::contiguous() const {
  HostTensor<T> out(shape_);
  const std::int64_t n = numel();
  for (std::int64_t i = 0; i < n; ++i) out.data_[i] = data_[offset(unravel(i))];
  return out;
}

template class HostTensor<float>;
template class HostTensor<double>;

}  // namespace course
