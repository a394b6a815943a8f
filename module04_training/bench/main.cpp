// The module 4 benchmark binary: every backward step (softmax backward, attention
// backward, ...), solution beside exercise beside its library or ceiling row, then the
// course summary table.
#include "course/bench.hpp"

COURSE_BENCHMARK_MAIN()
