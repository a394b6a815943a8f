#include "course/demo.hpp"

#include "course/reference.hpp"
#include "course/tensor.hpp"

#include <cmath>
#include <cstdarg>
#include <exception>
#include <iostream>
#include <random>
#include <set>

namespace course::demo {

std::optional<std::string> no_device_reason() {
  const std::optional<NoGpuReason> reason = no_gpu_reason();
  if (!reason) return std::nullopt;
  return reason->text("showing the CPU reference results only");
}

bool device_or_explain() {
  if (const auto why = no_device_reason()) {
    std::printf("%s\n", why->c_str());
    return false;
  }
  std::printf("device: %s\n", device_summary().c_str());
  return true;
}

int run(const std::function<void(bool gpu)>& body) {
  try {
    body(device_or_explain());
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}

std::string format(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  va_list again;
  va_copy(again, args);
  const int size = std::vsnprintf(nullptr, 0, fmt, args);
  va_end(args);
  std::string out(static_cast<std::size_t>(std::max(size, 0)), '\0');
  std::vsnprintf(out.data(), out.size() + 1, fmt, again);
  va_end(again);
  return out;
}

void section(const std::string& title) { std::printf("\n== %s\n", title.c_str()); }

std::vector<std::string> matrix_lines(const std::vector<double>& values, std::int64_t rows, std::int64_t cols,
                                      NumberFormat f) {
  std::vector<std::string> lines;
  for (std::int64_t r = 0; r < rows; ++r) {
    std::string line = "[";
    for (std::int64_t c = 0; c < cols; ++c) {
      const double v = values.at(static_cast<std::size_t>(r * cols + c));
      line += f.fixed ? format(" %*.*f", f.width, f.precision, v) : format(" %*.*g", f.width, f.precision, v);
    }
    lines.push_back(line + " ]");
  }
  return lines;
}

void print_side_by_side(const std::vector<std::string>& titles, const std::vector<std::vector<std::string>>& blocks) {
  std::vector<std::size_t> width(blocks.size());
  std::size_t height = 0;
  for (std::size_t b = 0; b < blocks.size(); ++b) {
    width[b] = titles.at(b).size();
    for (const auto& line : blocks[b]) width[b] = std::max(width[b], line.size());
    height = std::max(height, blocks[b].size());
  }
  // Row 0 holds the titles, row i > 0 line i - 1 of each block; cells padded to a common width.
  for (std::size_t row = 0; row <= height; ++row) {
    std::string out = "   ";
    for (std::size_t b = 0; b < blocks.size(); ++b) {
      std::string cell = row == 0 ? titles[b] : (row - 1 < blocks[b].size() ? blocks[b][row - 1] : "");
      cell.resize(width[b] + 3, ' ');
      out += cell;
    }
    out.erase(out.find_last_not_of(' ') + 1);
    std::printf("%s\n", out.c_str());
  }
}

void print_wrapped(const std::string& text, const std::string& indent, std::size_t width) {
  std::string line;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find(' ', start);
    if (end == std::string::npos) end = text.size();
    const std::string word = text.substr(start, end - start);
    if (!line.empty() && indent.size() + line.size() + 1 + word.size() > width) {
      std::printf("%s%s\n", indent.c_str(), line.c_str());
      line.clear();
    }
    if (!word.empty()) line += (line.empty() ? "" : " ") + word;
    start = end + 1;
  }
  if (!line.empty()) std::printf("%s%s\n", indent.c_str(), line.c_str());
}

std::string preview(const std::vector<double>& values, std::size_t count) {
  std::string s = "[";
  for (std::size_t i = 0; i < std::min(count, values.size()); ++i) s += format(" %.6g", values[i]);
  return s + " ]";
}

std::string not_implemented_text(const std::string& stub_file) {
  const std::size_t at = stub_file.rfind("exercises/");
  return "not implemented yet (" + (at == std::string::npos ? stub_file : stub_file.substr(at)) + ")";
}

bool selected(const char* name, const std::vector<std::string>& filter) {
  return filter.empty() || std::find(filter.begin(), filter.end(), name) != filter.end();
}

std::string check_step_name(const std::string& value, const std::vector<std::string>& names) {
  if (std::find(names.begin(), names.end(), value) != names.end()) return "";
  std::string msg = "'" + value + "' is not a step; the steps are:";
  for (const auto& name : names) msg += " " + name;
  return msg;
}

std::string check_range(const std::string& value, std::int64_t lo, std::int64_t hi) {
  std::size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != value.size()) return "'" + value + "' is not a whole number";
  if (v < lo || v > hi) return format("%lld is not in [%lld, %lld]", v, static_cast<long long>(lo), static_cast<long long>(hi));
  return "";
}

std::function<std::string(const std::vector<float>&)> exact_note(std::vector<double> ref) {
  return [ref = std::move(ref)](const std::vector<float>& got) {
    return std::equal(got.begin(), got.end(), ref.begin(), ref.end(),
                      [](float g, double r) { return static_cast<double>(g) == r; })
               ? std::string("exact")
               : std::string("WRONG");
  };
}

std::function<std::string(const std::vector<float>&)> max_error_note(std::vector<double> ref) {
  return [ref = std::move(ref)](const std::vector<float>& got) {
    double e = 0.0;
    for (std::size_t i = 0; i < got.size() && i < ref.size(); ++i) {
      const double d = std::fabs(static_cast<double>(got[i]) - ref[i]);
      e = std::isnan(d) ? INFINITY : std::max(e, d);  // NaN must not hide behind max()
    }
    return format("max|err| = %.2e", e);
  };
}

std::vector<double> show_matmul_example(const std::vector<float>& a, const std::vector<float>& b, std::int64_t m,
                                        std::int64_t n, std::int64_t k) {
  HostTensor<double> at({m, k}), bt({k, n});
  std::copy(a.begin(), a.end(), at.storage().begin());
  std::copy(b.begin(), b.end(), bt.storage().begin());
  std::vector<double> c = ref::matmul(at, bt).storage();
  const NumberFormat f{5, 6, false};
  print_side_by_side({"A", "B", "C (CPU reference)"},
                     {matrix_lines(at.storage(), m, k, f), matrix_lines(bt.storage(), k, n, f), matrix_lines(c, m, n, f)});
  return c;
}

std::vector<std::int64_t> sample_rows(std::int64_t m, std::int64_t count, std::uint64_t seed) {
  std::vector<std::int64_t> rows;
  if (count >= m) {
    for (std::int64_t i = 0; i < m; ++i) rows.push_back(i);
    return rows;
  }
  std::set<std::int64_t> picked{0, m - 1};
  std::mt19937_64 gen(seed);
  while (static_cast<std::int64_t>(picked.size()) < std::max<std::int64_t>(count, 2))
    picked.insert(static_cast<std::int64_t>(gen() % static_cast<std::uint64_t>(m)));
  return {picked.begin(), picked.end()};
}

std::vector<float> gather_rows(const std::vector<float>& values, const std::vector<std::int64_t>& rows,
                               std::int64_t cols, std::int64_t ld) {
  std::vector<float> out;
  out.reserve(rows.size() * static_cast<std::size_t>(cols));
  for (const std::int64_t r : rows) {
    const auto first = values.begin() + static_cast<std::ptrdiff_t>(r * ld);
    out.insert(out.end(), first, first + static_cast<std::ptrdiff_t>(cols));
  }
  return out;
}

SampledProduct sampled_matmul_reference(const std::vector<float>& a, const std::vector<float>& b, std::int64_t m,
                                        std::int64_t n, std::int64_t k, std::int64_t count, std::uint64_t seed) {
  SampledProduct out;
  out.rows = sample_rows(m, count, seed);
  const auto r = static_cast<std::int64_t>(out.rows.size());
  const std::vector<float> a_rows = gather_rows(a, out.rows, k, k);
  HostTensor<double> at({r, k}), bt({k, n});
  std::copy(a_rows.begin(), a_rows.end(), at.storage().begin());
  std::copy(b.begin(), b.end(), bt.storage().begin());
  HostTensor<double> c;
  const double ms = cpu_ms([&] { return ref::matmul(at, bt); }, c);
  out.c = c.storage();
  out.rms = rms(c);
  std::printf("   CPU reference (double) on %lld of %lld rows: %.0f ms; C[0, 0:4] = %s\n", static_cast<long long>(r),
              static_cast<long long>(m), ms, preview(out.c, static_cast<std::size_t>(std::min<std::int64_t>(n, 4))).c_str());
  return out;
}

CompareResult compare_rows(const std::vector<float>& c, std::int64_t ldc, std::int64_t n, const SampledProduct& ref,
                           Tolerance tol) {
  return compare(gather_rows(c, ref.rows, n, ldc), ref.c, tol);
}

}  // namespace course::demo
