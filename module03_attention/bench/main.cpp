// The module 3 benchmark binary: every step of the attention ladder, solution beside
// exercise beside the cuBLAS-materialized pipeline, then the course summary table.
#include "course/bench.hpp"

COURSE_BENCHMARK_MAIN()
