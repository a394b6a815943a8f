#include "course/bench.hpp"

#include "course/device.hpp"
#include "course/error.hpp"
#include "course/timer.hpp"

#include <algorithm>
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>
#include <type_traits>
#include <utility>
#include <vector>

namespace course::bench {

void time_iteration(benchmark::State& state, const std::function<void()>& fn, cudaStream_t stream) {
  static EventTimer* timer = new EventTimer();  // lives for the process; avoids per-iteration event churn
  timer->start(stream);
  fn();
  timer->stop(stream);
  state.SetIterationTime(static_cast<double>(timer->elapsed_ms()) * 1e-3);
}

double measured_copy_bandwidth_gbs() {
  static const double gbs = [] {
    const std::size_t bytes = std::size_t{1} << 30;
    DeviceBuffer<unsigned char> src(bytes), dst(bytes);
    COURSE_CUDA_CHECK(cudaMemset(src.data(), 1, bytes));
    const TimingStats t = time_kernel(
        [&] { COURSE_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), bytes, cudaMemcpyDeviceToDevice)); },
        3, 20);
    return 2.0 * static_cast<double>(bytes) / (t.median_ms * 1e-3) / 1e9;  // read + write
  }();
  return gbs;
}

void set_bandwidth(benchmark::State& state, double bytes_moved) {
  const double iters = static_cast<double>(state.iterations());
  state.counters["GB/s"] = benchmark::Counter(bytes_moved * iters / 1e9, benchmark::Counter::kIsRate);
  // kIsRate divides by the manual time; "of_copy" is computed in the reporter
  // from GB/s and this per-process ceiling.
  state.counters["copy_GB/s"] = measured_copy_bandwidth_gbs();
}

void set_flops(benchmark::State& state, double flops, double ceiling_tflops) {
  const double iters = static_cast<double>(state.iterations());
  state.counters["TFLOP/s"] = benchmark::Counter(flops * iters / 1e12, benchmark::Counter::kIsRate);
  if (ceiling_tflops > 0) state.counters["ceiling_TFLOP/s"] = ceiling_tflops;
}

void mark_diagnostic(benchmark::State& state) { state.counters["diagnostic"] = 1.0; }

void set_device_memory(benchmark::State& state, std::size_t bytes) {
  state.counters["mem_MB"] = static_cast<double>(bytes) / 1e6;
}

bool require_device(benchmark::State& state) {
  const std::optional<NoGpuReason> reason = no_gpu_reason();
  if (!reason) return true;
  state.SkipWithError(reason->headline.c_str());
  return false;
}

std::string row_name(const std::string& op, const std::string& impl, const std::string& step,
                     const std::string& shape) {
  return op + "/" + impl + "/" + step + "/" + shape;
}

benchmark::internal::Benchmark* add_row(const std::string& name, benchmark::TimeUnit unit,
                                        std::function<void(benchmark::State&)> fn) {
  return benchmark::RegisterBenchmark(name.c_str(), std::move(fn))->UseManualTime()->Unit(unit);
}

bool guard(benchmark::State& state, const std::function<void()>& body) {
  if (!require_device(state)) return false;
  try {
    body();
    return true;
  } catch (const NotImplemented& e) {
    state.SkipWithError((std::string("not implemented: ") + e.what()).c_str());
  } catch (const Error& e) {
    state.SkipWithError(e.what());
  }
  return false;
}

double l2_cache_bytes() { return static_cast<double>(device_properties().l2CacheSize); }

int rotation_copies(double bytes) { return static_cast<int>(std::clamp(200e6 / bytes, 1.0, 8.0)); }

std::string attention_shape(std::int64_t B, std::int64_t H, std::int64_t N, std::int64_t d, bool causal) {
  return "B" + std::to_string(B) + "_H" + std::to_string(H) + "_N" + std::to_string(N) + "_d" + std::to_string(d) +
         (causal ? "_causal" : "");
}

void check_cublas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw Error(std::string(what) + " failed with cuBLAS status " + std::to_string(static_cast<int>(status)));
}

cublasHandle_t cublas_handle(bool device_pointer_mode) {
  auto create = [](cublasPointerMode_t mode) {
    cublasHandle_t h = nullptr;
    check_cublas(cublasCreate(&h), "cublasCreate");
    check_cublas(cublasSetStream(h, nullptr), "cublasSetStream");
    check_cublas(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
    check_cublas(cublasSetPointerMode(h, mode), "cublasSetPointerMode");
    return h;
  };
  // Each created on first use and never destroyed: they live for the process.
  if (device_pointer_mode) {
    static const cublasHandle_t device_mode = create(CUBLAS_POINTER_MODE_DEVICE);
    return device_mode;
  }
  static const cublasHandle_t host_mode = create(CUBLAS_POINTER_MODE_HOST);
  return host_mode;
}

namespace {

/// One parsed row "op/impl/step/shape" with its headline metric.
struct Row {
  std::string op, impl, step, shape;
  double value = 0.0;  // GB/s or TFLOP/s
  std::string unit;
  double ceiling = 0.0;  // copy GB/s for bandwidth rows
  bool diagnostic = false;  // mark_diagnostic(): listed, never the reference library row
  bool error = false;
  std::string message;
};

// Google Benchmark 1.7 reports a skipped run through `error_occurred`, 1.8 through
// `skipped`; support both (CI has 1.7, the GPU machine 1.8).
template <class R, class = void>
struct HasErrorOccurred : std::false_type {};
template <class R>
struct HasErrorOccurred<R, std::void_t<decltype(std::declval<const R&>().error_occurred)>> : std::true_type {};

template <class R>
bool run_was_skipped(const R& run, std::string* message) {
  if constexpr (HasErrorOccurred<R>::value) {
    *message = run.error_message;
    return run.error_occurred;
  } else {
    *message = run.skip_message;
    return static_cast<int>(run.skipped) != 0;
  }
}

bool parse_name(const std::string& name, Row& row) {
  // Google Benchmark appends "/manual_time" etc.; the course's four fields come first.
  std::vector<std::string> parts;
  std::stringstream ss(name);
  for (std::string p; std::getline(ss, p, '/');) parts.push_back(p);
  if (parts.size() < 4) return false;
  row.op = parts[0]; row.impl = parts[1]; row.step = parts[2]; row.shape = parts[3];
  return true;
}

/// Console output as usual, plus the course table at the end.
class SummaryReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs) {
      if (run.run_type == Run::RT_Aggregate && run.aggregate_name != "median") continue;
      Row row;
      if (!parse_name(run.benchmark_name(), row)) continue;
      row.error = run_was_skipped(run, &row.message);
      if (auto it = run.counters.find("TFLOP/s"); it != run.counters.end()) {
        row.value = it->second.value; row.unit = "TFLOP/s";
      } else if (auto it2 = run.counters.find("GB/s"); it2 != run.counters.end()) {
        row.value = it2->second.value; row.unit = "GB/s";
        if (auto c = run.counters.find("copy_GB/s"); c != run.counters.end()) row.ceiling = c->second.value;
      } else {
        row.value = 1e3 / std::max(run.GetAdjustedRealTime(), 1e-12); row.unit = "runs/ms";
      }
      row.diagnostic = run.counters.count("diagnostic") != 0;
      auto& steps = step_order_[{row.op, row.shape}];
      if (std::find(steps.begin(), steps.end(), row.step) == steps.end()) steps.push_back(row.step);
      rows_[{row.op, row.shape}][row.step][row.impl] = row;
      order_.push_back({row.op, row.shape});
    }
  }

  void Finalize() override {
    ConsoleReporter::Finalize();
    std::ostream& os = GetOutputStream();
    os << "\n=== course summary (" << device_summary() << ") ===\n";
    std::map<std::pair<std::string, std::string>, bool> seen;
    for (const auto& key : order_) {
      if (seen[key]) continue;
      seen[key] = true;
      const auto& steps = rows_[key];
      // The reference library row is the FASTEST library measured (e.g. CUB vs cuBLAS for
      // a reduction): "sol/lib" then never flatters the solution. All are listed below;
      // diagnostic rows (part of the op's traffic only) are never the reference.
      const Row* lib = nullptr;
      std::vector<const Row*> libs;
      for (const auto& [step, impls] : steps)
        if (auto it = impls.find("library"); it != impls.end() && !it->second.error) {
          libs.push_back(&it->second);
          if (!it->second.diagnostic && (lib == nullptr || it->second.value > lib->value)) lib = &it->second;
        }
      os << "\n" << key.first << "  " << key.second << "\n";
      os << std::left << std::setw(26) << "step" << std::right << std::setw(12) << "solution"
         << std::setw(12) << "yours" << std::setw(12) << "library" << std::setw(10) << "yours/sol"
         << std::setw(10) << "sol/lib" << std::setw(10) << "sol/copy" << "\n";
      for (const std::string& step : step_order_[key]) {
        const auto& impls = steps.at(step);
        if (impls.count("library")) continue;
        auto cell = [&](const char* impl) -> std::string {
          auto it = impls.find(impl);
          if (it == impls.end()) return "-";
          if (it->second.error) return "skip";
          std::ostringstream c; c << std::fixed << std::setprecision(1) << it->second.value; return c.str();
        };
        auto value = [&](const char* impl) -> double {
          auto it = impls.find(impl);
          return (it == impls.end() || it->second.error) ? 0.0 : it->second.value;
        };
        auto ratio = [](double a, double b) -> std::string {
          if (a <= 0 || b <= 0) return "-";
          std::ostringstream c; c << std::fixed << std::setprecision(2) << a / b; return c.str();
        };
        const double sol = value("solution"), yours = value("exercise");
        double ceiling = 0.0;
        if (auto it = impls.find("solution"); it != impls.end()) ceiling = it->second.ceiling;
        std::string unit = "-";  // from a row that ran: a skipped row has no counters
        for (const auto& [impl, r] : impls)
          if (!r.error) { unit = r.unit; break; }
        os << std::left << std::setw(26) << step << std::right << std::setw(12) << cell("solution")
           << std::setw(12) << cell("exercise") << std::setw(12)
           << (lib ? [&] { std::ostringstream c; c << std::fixed << std::setprecision(1) << lib->value; return c.str(); }() : "-")
           << std::setw(10) << ratio(yours, sol) << std::setw(10) << ratio(sol, lib ? lib->value : 0)
           << std::setw(10) << ratio(sol, ceiling) << "   " << unit << "\n";
      }
      for (const Row* l : libs)
        os << "  library " << std::left << std::setw(20) << l->step << std::right << std::fixed
           << std::setprecision(1) << std::setw(10) << l->value << " " << l->unit << (l == lib ? "  <- the 'library' column" : "")
           << "\n";
    }
  }

 private:
  std::map<std::pair<std::string, std::string>, std::map<std::string, std::map<std::string, Row>>> rows_;
  std::vector<std::pair<std::string, std::string>> order_;
  std::map<std::pair<std::string, std::string>, std::vector<std::string>> step_order_;
};

}  // namespace

int run_with_summary(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  if (const std::optional<NoGpuReason> reason = no_gpu_reason()) {
    std::cerr << "[course] " << reason->text("the benchmarks need one; nothing to run", "[course]   ") << "\n";
    return 0;
  }
  std::cout << "[course] device: " << device_summary() << "\n"
            << "[course] device-to-device copy ceiling: " << std::fixed << std::setprecision(0)
            << measured_copy_bandwidth_gbs() << " GB/s (read + write)\n";
  SummaryReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}

}  // namespace course::bench
