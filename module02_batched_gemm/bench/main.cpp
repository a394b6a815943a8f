// The module 2 benchmark binary: every step of the batched GEMM (strided and
// pointer-array), solution beside exercise beside cuBLAS, then the course summary table.
#include "course/bench.hpp"

COURSE_BENCHMARK_MAIN()
