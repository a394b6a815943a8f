#pragma once
/// @file demo.hpp
/// @brief The demos' toolkit: what every demo executable does the same way.
///
/// A demo runs an op's ladder of steps, the solution's and the exercise's, first on the
/// lesson's worked example and then at a realistic size, and prints each step's result,
/// its error against the CPU reference and its time. This header holds the shared parts:
///
/// - run(): the "device: ..." or "no NVIDIA GPU found: ..." banner, then the demo, with errors
///   turned into one line and exit code 1;
/// - Ladder: every selected step x {solution, exercise}, each run once on poisoned output,
///   an exercise that is not written yet (course::NotImplemented) shown as such; as
///   matrices side by side (worked examples) or as a results table (error, time, rate);
/// - text: matrix_lines(), print_side_by_side(), preview(), format();
/// - the --steps option (add_steps_option()), without tying course_common to CLI11;
/// - sampled CPU references for large matrix products; VectorReduction for ops whose
///   result is one number.

#include "course/compare.hpp"
#include "course/device.hpp"
#include "course/error.hpp"
#include "course/impl.hpp"
#include "course/random.hpp"
#include "course/timer.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

/// Lets GCC and Clang check printf-style arguments of a function.
#if defined(__GNUC__)
#define COURSE_PRINTF_LIKE(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define COURSE_PRINTF_LIKE(fmt, args)
#endif

namespace course::demo {

// ---------------------------------------------------------------------------------------
// Device banner and error handling

/// The demos' no-GPU banner, nullopt when a CUDA device is usable: the course's wording
/// (course::NoGpuReason) in two lines, "no NVIDIA GPU found: showing the CPU reference
/// results only", then the CUDA runtime's words.
std::optional<std::string> no_device_reason();

/// With a device: prints "device: " and device_summary(), returns true. Without: prints
/// no_device_reason() and returns false.
bool device_or_explain();

/// The frame of a demo's main(): device_or_explain(), then `body(gpu)`. Returns the exit
/// code: 0, or 1 after printing "error: " + what() when the body throws.
int run(const std::function<void(bool gpu)>& body);

// ---------------------------------------------------------------------------------------
// Text

/// printf into a std::string.
std::string format(const char* fmt, ...) COURSE_PRINTF_LIKE(1, 2);

/// Starts a part of the output: a blank line, then "== " + title.
void section(const std::string& title);

/// How matrix_lines() writes one number: printf's "%*.*f" (fixed) or "%*.*g" with this
/// width and precision.
struct NumberFormat {
  int width = 8;
  int precision = 4;
  bool fixed = true;
};

/// A small row-major matrix as lines of text, e.g. "[   0.0900   0.2447   0.6652 ]".
std::vector<std::string> matrix_lines(const std::vector<double>& values, std::int64_t rows, std::int64_t cols,
                                      NumberFormat format = {});

/// Prints blocks of lines (e.g. matrix_lines()) side by side, each under its title.
void print_side_by_side(const std::vector<std::string>& titles, const std::vector<std::vector<std::string>>& blocks);

/// Prints `text` wrapped to lines of at most `width` characters, each starting with
/// `indent` (a word longer than a line gets a line of its own).
void print_wrapped(const std::string& text, const std::string& indent, std::size_t width = 92);

/// The first `count` values as "[ 0.1 0.2 0.3 0.4 ]" (%.6g each).
std::string preview(const std::vector<double>& values, std::size_t count = 4);

/// "not implemented yet (exercises/module01_basics/softmax.cu)": the file of a stub,
/// from its "exercises/" folder on.
std::string not_implemented_text(const std::string& stub_file);

/// Milliseconds `fn` takes on the CPU; its result goes to `result`.
template <class Fn, class R>
double cpu_ms(Fn&& fn, R& result) {
  const auto t0 = std::chrono::steady_clock::now();
  result = fn();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// ---------------------------------------------------------------------------------------
// Steps: filter and command line

/// True when `name` passes the --steps filter (an empty filter passes every step).
bool selected(const char* name, const std::vector<std::string>& filter);

/// Names of a ladder's steps, in teaching order.
template <class Step, std::size_t N>
std::vector<std::string> step_names(const StepInfo<Step> (&steps)[N]) {
  std::vector<std::string> names;
  for (const auto& info : steps) names.emplace_back(info.name);
  return names;
}

/// "" when `value` is one of `names`, else the message a command line shows.
std::string check_step_name(const std::string& value, const std::vector<std::string>& names);

/// "" when `value` is a whole number in [lo, hi], else the message a command line shows.
std::string check_range(const std::string& value, std::int64_t lo, std::int64_t hi);

/// Adds "--steps a,b,..." (only these steps; default all) to a CLI11 app. A template on
/// the app type, so that course_common does not need CLI11: any CLI11 version whose
/// Option::check accepts a function returning an error string works.
template <class App, class Step, std::size_t N>
void add_steps_option(App& app, std::vector<std::string>& steps, const StepInfo<Step> (&ladder)[N]) {
  std::vector<std::string> names = step_names(ladder);
  std::string list;
  for (const auto& name : names) list += (list.empty() ? "" : ",") + name;
  app.add_option("--steps", steps, "only these steps, comma separated (default: all)")
      ->delimiter(',')
      ->check([names](const std::string& value) { return check_step_name(value, names); }, "{" + list + "}",
              "STEP");
}

// ---------------------------------------------------------------------------------------
// Running a ladder

/// The work one call does, for the rate column of a results table.
struct Work {
  const char* unit;  ///< "GB/s" or "TFLOP/s"
  double per_call;   ///< bytes or FLOPs per call
  double scale;      ///< 1e9 or 1e12
  int decimals;      ///< digits after the point in the table
  /// Bandwidth: `bytes` moved per call (the ideal count: each input read once, each output written once).
  static Work bytes(double bytes) { return {"GB/s", bytes, 1e9, 1}; }
  /// Arithmetic: `flops` floating-point operations per call.
  static Work flops(double flops) { return {"TFLOP/s", flops, 1e12, 2}; }
  /// The rate of a call that took `ms` milliseconds.
  double rate(double ms) const { return per_call / (ms * 1e-3) / scale; }
};

/// Warm-up calls and timed calls of time_kernel().
struct Timing {
  int warmup = 3;
  int runs = 20;
};

/// A reference time shown as the first row of a results table and as a last column
/// ("of copy": reference time / step time, 1.00 = as fast as the reference).
struct Ceiling {
  std::string label;  ///< e.g. "library/d2d_copy (ceiling)"
  double ms;          ///< its median time
  std::string column; ///< title of the ratio column, e.g. "of copy"
};

/// What a results table shows besides the label, the error and "ok".
template <class Step>
struct TableOptions {
  std::optional<Work> work;                  ///< set: time and rate columns
  bool show_value = false;                   ///< a "result" column with the first output value
  std::function<Timing(Step)> timing;        ///< per step; unset: Timing{}
  std::optional<Ceiling> ceiling;            ///< a reference row and ratio column
  /// Set: the lesson's word on a step whose result may miss the tolerance by design
  /// ("" for the others), printed right under the first of its rows marked NO.
  std::function<std::string(Step)> why_off;
};

/// One implementation's run of one step (see Ladder::for_each_step).
template <class Step, class Args>
struct Run {
  StepInfo<Step> step;
  const char* impl;                          ///< "solution" or "exercise"
  void (*fn)(Step, const Args&);             ///< the implementation's function
  std::string label;                         ///< "solution/warp_per_row"
  std::optional<std::vector<float>> output;  ///< nullopt: an exercise not written yet
  std::string stub_file;                     ///< the file to edit, when output is nullopt
};

/// An op's ladder of steps and its two implementations (course::solution and
/// course::exercise), restricted to the steps a --steps filter selects.
template <class Step, class Args>
class Ladder {
 public:
  /// The op's function, as declared by COURSE_DECLARE_FOR_BOTH_IMPLS.
  using Fn = void (*)(Step, const Args&);

  /// Every step of `steps` that passes `filter` (empty: all), in teaching order.
  template <std::size_t N>
  Ladder(const StepInfo<Step> (&steps)[N], Fn solution, Fn exercise, const std::vector<std::string>& filter = {})
      : impls_{{{"solution", solution}, {"exercise", exercise}}} {
    for (const auto& info : steps)
      if (selected(info.name, filter)) steps_.push_back(info);
  }

  /// The same ladder restricted to the steps `filter` selects.
  Ladder only(const std::vector<std::string>& filter) const {
    Ladder l = *this;
    l.steps_.clear();
    for (const auto& info : steps_)
      if (selected(info.name, filter)) l.steps_.push_back(info);
    return l;
  }

  /// For every selected step, runs both implementations once on `args` (`out`, the
  /// buffer the op writes, poisoned first and downloaded after) and calls
  /// `visit(runs)` with the two Run records, solution first.
  template <class Visit>
  void for_each_step(const Args& args, DeviceBuffer<float>& out, Visit&& visit) const {
    for (const auto& info : steps_) {
      std::array<Run<Step, Args>, 2> runs;
      for (std::size_t i = 0; i < runs.size(); ++i) {
        Run<Step, Args>& r = runs[i];
        r.step = info;
        r.impl = impls_[i].first;
        r.fn = impls_[i].second;
        r.label = std::string(r.impl) + "/" + info.name;
        out.poison();
        try {
          r.fn(info.step, args);
        } catch (const NotImplemented& e) {
          r.stub_file = e.file();
          continue;
        }
        COURSE_CUDA_CHECK(cudaDeviceSynchronize());
        r.output = out.download();
      }
      visit(runs);
    }
  }

  /// Worked-example view: for every step, each implementation's `rows` x `cols` output
  /// side by side under "impl/step", then a line with `note(output)` of each (e.g.
  /// "exact", "max|err| = 1.5e-08").
  void show_matrices(const Args& args, DeviceBuffer<float>& out, std::int64_t rows, std::int64_t cols,
                     NumberFormat format, const std::function<std::string(const std::vector<float>&)>& note) const {
    for_each_step(args, out, [&](const std::array<Run<Step, Args>, 2>& runs) {
      std::vector<std::string> titles;
      std::vector<std::vector<std::string>> blocks;
      std::string notes;  // "solution: exact   exercise: WRONG"
      for (const auto& r : runs) {
        titles.push_back(r.label);
        if (!r.output) {
          blocks.push_back(stub_lines(r.stub_file));
          continue;
        }
        blocks.push_back(matrix_lines(std::vector<double>(r.output->begin(), r.output->end()), rows, cols, format));
        notes += (notes.empty() ? "" : "   ") + std::string(r.impl) + ": " + note(*r.output);
      }
      print_side_by_side(titles, blocks);
      if (!notes.empty()) std::printf("   %s\n", notes.c_str());
    });
  }

  /// Results-table view: a header, then one row per step and implementation with the
  /// maximum error and verdict of `check(output)`, and per `options` the first value,
  /// the median time and the rate. An unwritten exercise gets a "not implemented yet" row.
  void table(const Args& args, DeviceBuffer<float>& out,
             const std::function<CompareResult(const std::vector<float>&)>& check,
             const TableOptions<Step>& options) const {
    std::size_t width = std::strlen("impl/step");
    for (const auto& info : steps_) width = std::max(width, std::strlen("solution/") + std::strlen(info.name));
    if (options.ceiling) width = std::max(width, options.ceiling->label.size());
    const int w = static_cast<int>(width);
    std::printf("   %-*s", w, "impl/step");
    if (options.show_value) std::printf(" %16s", "result");
    std::printf(" %10s %4s", "max|err|", "ok");
    if (options.work) std::printf(" %10s %9s", "time (ms)", options.work->unit);
    if (options.ceiling) std::printf(" %8s", options.ceiling->column.c_str());
    std::printf("\n");
    if (options.ceiling && options.work) {
      const Ceiling& c = *options.ceiling;
      std::printf("   %-*s%s %10s %4s %10.4f %9.*f %8.2f\n", w, c.label.c_str(), options.show_value ? "                 " : "",
                  "-", "-", c.ms, options.work->decimals, options.work->rate(c.ms), 1.0);
    }
    for_each_step(args, out, [&](const std::array<Run<Step, Args>, 2>& runs) {
      bool explained = false;  // the step's note is printed once, under its first NO
      for (const auto& r : runs) {
        std::printf("   %-*s", w, r.label.c_str());
        if (!r.output) {
          std::printf(" %s\n", not_implemented_text(r.stub_file).c_str());
          continue;
        }
        const CompareResult cmp = check(*r.output);
        if (options.show_value) std::printf(" %16.9g", static_cast<double>(r.output->at(0)));
        std::printf(" %10.2e %4s", cmp.max_abs_error, cmp.ok() ? "yes" : "NO");
        if (options.work) {
          const Timing timing = options.timing ? options.timing(r.step.step) : Timing{};
          const Fn fn = r.fn;
          const Step step = r.step.step;
          const TimingStats t = time_kernel([&] { fn(step, args); }, timing.warmup, timing.runs);
          std::printf(" %10.4f %9.*f", t.median_ms, options.work->decimals, options.work->rate(t.median_ms));
          if (options.ceiling) std::printf(" %8.2f", options.ceiling->ms / t.median_ms);
        }
        std::printf("\n");
        if (!cmp.ok() && !explained && options.why_off) {
          const std::string why = options.why_off(r.step.step);
          if (!why.empty()) print_wrapped("why NO: " + why, "      ");
          explained = true;
        }
      }
    });
  }

 private:
  /// A stub's "not implemented yet" message, split to fit a matrix block.
  static std::vector<std::string> stub_lines(const std::string& stub_file) {
    const std::string text = not_implemented_text(stub_file);  // "not implemented yet (dir/file.cu)"
    const std::size_t slash = text.rfind('/');
    if (slash == std::string::npos) return {"(" + text + ")"};
    const std::size_t open = text.find('(');
    return {"(not implemented yet:", " " + text.substr(open + 1, slash - open), " " + text.substr(slash + 1)};
  }

  std::vector<StepInfo<Step>> steps_;
  std::array<std::pair<const char*, Fn>, 2> impls_;
};

// ---------------------------------------------------------------------------------------
// Notes for Ladder::show_matrices

/// "exact" when the output equals `ref` element for element, else "WRONG".
std::function<std::string(const std::vector<float>&)> exact_note(std::vector<double> ref);

/// "max|err| = 1.5e-08" against `ref`.
std::function<std::string(const std::vector<float>&)> max_error_note(std::vector<double> ref);

// ---------------------------------------------------------------------------------------
// Matrix products: worked example and sampled CPU reference

/// Prints A (m x k), B (k x n) and their product computed on the CPU side by side and
/// returns the product (row-major, m x n). For the small integer worked examples.
std::vector<double> show_matmul_example(const std::vector<float>& a, const std::vector<float>& b, std::int64_t m,
                                        std::int64_t n, std::int64_t k);

/// Rows of C = A * B checked against the CPU reference: all `m` when `count` >= m, else
/// the first, the last and `count` - 2 others drawn at random (seeded) -- different
/// positions within the kernels' tiles.
std::vector<std::int64_t> sample_rows(std::int64_t m, std::int64_t count, std::uint64_t seed);

/// The rows `rows` (each `cols` values, row stride `ld`) of a row-major matrix, packed.
std::vector<float> gather_rows(const std::vector<float>& values, const std::vector<std::int64_t>& rows,
                               std::int64_t cols, std::int64_t ld);

/// The CPU reference (double accumulation) of some rows of C = A * B.
struct SampledProduct {
  std::vector<std::int64_t> rows;  ///< which rows of C, ascending
  std::vector<double> c;           ///< those rows, packed (rows.size() x n)
  double rms = 0.0;                ///< root mean square of `c`: the result scale for tolerance_for()
};

/// Computes the reference of C = A * B (A m x k, B k x n, both packed row-major) on
/// sample_rows(m, count, seed) and prints "CPU reference (double) on R of M rows: T ms;
/// C[0, 0:4] = [ ... ]". A full product in double at 4096^3 would take minutes.
SampledProduct sampled_matmul_reference(const std::vector<float>& a, const std::vector<float>& b, std::int64_t m,
                                        std::int64_t n, std::int64_t k, std::int64_t count, std::uint64_t seed);

/// Checks a device result C (m x ldc, row-major) on the reference's rows.
CompareResult compare_rows(const std::vector<float>& c, std::int64_t ldc, std::int64_t n, const SampledProduct& ref,
                           Tolerance tol);

// ---------------------------------------------------------------------------------------
// Ops whose result is one number

/// Command-line values of a demo on vectors of length n.
struct VectorOptions {
  std::int64_t n;                  ///< length of the realistic run
  std::uint64_t seed;              ///< seed of its random inputs (input i uses seed + i)
  std::vector<std::string> steps;  ///< --steps filter

  /// Defaults of the realistic run.
  VectorOptions(std::int64_t n0, std::uint64_t seed0) : n(n0), seed(seed0) {}

  /// Adds --n, --seed and --steps to a CLI11 app.
  template <class App, class Step, std::size_t N>
  void add_to(App& app, const StepInfo<Step> (&ladder)[N]) {
    app.add_option("--n", n, "length of the realistic run")
        ->check([](const std::string& value) { return check_range(value, 0, INT64_MAX); }, "NONNEGATIVE");
    app.add_option("--seed", seed, "seed of the random input (default: $COURSE_SEED or a fixed hash)");
    add_steps_option(app, steps, ladder);
  }
};

/// Command-line values of a demo on a matrix product C (m x n) = A (m x k) * B (k x n).
struct ProductOptions {
  std::int64_t m;                  ///< rows of A and C
  std::int64_t n;                  ///< columns of B and C
  std::int64_t k;                  ///< columns of A, rows of B
  std::uint64_t seed = 42;         ///< seed of the random matrices (B uses seed + 1)
  std::vector<std::string> steps;  ///< --steps filter

  /// Defaults of the realistic run.
  ProductOptions(std::int64_t m0, std::int64_t n0, std::int64_t k0) : m(m0), n(n0), k(k0) {}

  /// Adds --m, --n, --k (each in [1, 65536]), --seed and --steps to a CLI11 app.
  template <class App, class Step, std::size_t N>
  void add_to(App& app, const StepInfo<Step> (&ladder)[N]) {
    const auto extent = [](const std::string& value) { return check_range(value, 1, std::int64_t{1} << 16); };
    app.add_option("--m", m, "rows of A and C")->check(extent, "[1, 65536]");
    app.add_option("--n", n, "columns of B and C")->check(extent, "[1, 65536]");
    app.add_option("--k", k, "columns of A, rows of B")->check(extent, "[1, 65536]");
    app.add_option("--seed", seed, "seed of the random matrices");
    add_steps_option(app, steps, ladder);
  }
};

/// An op that reduces `inputs` vectors of one length to one float (module 1's L2 norm
/// and dot product), described for run_vector_reduction().
template <class Step, class Args>
struct VectorReduction {
  Ladder<Step, Args> ladder;  ///< its steps and implementations
  std::size_t inputs;         ///< vectors it reads (its bytes per element are 4 * inputs)
  /// CPU reference in double from host pointers to the inputs and their length.
  std::function<double(const std::vector<const float*>&, std::int64_t)> reference;
  /// The op's arguments: device inputs, length, result (one float), workspace.
  std::function<Args(const std::vector<const float*>&, std::int64_t, float*, float*, std::size_t)> args;
  /// Workspace bytes for length n.
  std::function<std::size_t(std::int64_t)> workspace_bytes;
  /// The lesson's word on a step that may miss the tolerance by design (TableOptions::why_off).
  std::function<std::string(Step)> why_off;
};

/// One part of a vector-reduction demo: prints the CPU reference of `inputs`, then (with
/// a GPU) a results table of every step; `timed` adds time and bandwidth.
template <class Step, class Args>
void reduction_table(const VectorReduction<Step, Args>& op, const Ladder<Step, Args>& ladder,
                     const std::vector<std::vector<float>>& inputs, bool gpu, bool timed) {
  const auto n = static_cast<std::int64_t>(inputs.at(0).size());
  std::vector<const float*> host;
  for (const auto& v : inputs) host.push_back(v.data());
  double ref = 0.0;
  const double ms = cpu_ms([&] { return op.reference(host, n); }, ref);
  std::printf("   CPU reference (double): %.9g (%.1f ms)\n", ref, ms);
  if (!gpu) return;
  std::vector<DeviceBuffer<float>> device;
  std::vector<const float*> device_ptrs;
  for (const auto& v : inputs) device_ptrs.push_back(device.emplace_back(v).data());
  DeviceBuffer<float> result(1), workspace((op.workspace_bytes(n) + sizeof(float) - 1) / sizeof(float));
  const Args args = op.args(device_ptrs, n, result.data(), workspace.data(), workspace.bytes());
  const Tolerance tol = tolerance_for(DType::f32, std::max<std::int64_t>(n, 1));
  TableOptions<Step> options;
  options.show_value = true;
  options.why_off = op.why_off;
  if (timed) options.work = Work::bytes(4.0 * static_cast<double>(op.inputs) * static_cast<double>(n));
  ladder.table(args, result, [&](const std::vector<float>& got) { return compare_scalar(got.at(0), ref, tol); },
               options);
}

/// A vector-reduction demo: the worked example `example` (titled `title`, e.g.
/// "||[3, 4]|| = 5"), then opt.n random values in [-1, 1). Returns the exit code.
template <class Step, class Args>
int run_vector_reduction(const VectorReduction<Step, Args>& op, const std::vector<std::vector<float>>& example,
                         const std::string& title, const VectorOptions& opt) {
  const Ladder<Step, Args> ladder = op.ladder.only(opt.steps);
  return run([&](bool gpu) {
    section("worked example: " + title);
    reduction_table(op, ladder, example, gpu, /*timed=*/false);
    section(format("n = %lld random values in [-1, 1) (seed %llu), median of 20 runs", static_cast<long long>(opt.n),
                   static_cast<unsigned long long>(opt.seed)));
    std::vector<std::vector<float>> inputs;
    for (std::size_t i = 0; i < op.inputs; ++i)
      inputs.push_back(random_vector(static_cast<std::size_t>(opt.n), opt.seed + i));
    reduction_table(op, ladder, inputs, gpu, /*timed=*/true);
  });
}

}  // namespace course::demo
