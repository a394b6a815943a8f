// The module 1 benchmark binary: every step of every op, solution beside exercise
// beside the library, then the course summary table.
#include "course/bench.hpp"

COURSE_BENCHMARK_MAIN()
