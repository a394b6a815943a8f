# course_add_* : the one place that knows the course's flags, labels and test
# registration. Module CMakeLists only list sources.

option(COURSE_PTXAS_VERBOSE "Print ptxas resource usage for every kernel" OFF)

# Flags shared by every course target.
add_library(course_flags INTERFACE)
target_compile_options(course_flags INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra>
  $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -Xcompiler=-Wall -lineinfo>
  # Resource report (registers, shared memory, spills) for solution kernels, on request.
  $<$<AND:$<COMPILE_LANGUAGE:CUDA>,$<BOOL:${COURSE_PTXAS_VERBOSE}>>:-Xptxas=-v>)

# course_add_module(<dir> [DEPENDS <module>...])
#   <dir>/include           public API headers (target <dir>_api)
#   solutions/<dir>         target <dir>_solution  (namespace course::solution)
#   exercises/<dir>         target <dir>_exercise  (namespace course::exercise)
#   <dir>/                  tests, benches, demos
#   DEPENDS: the earlier modules whose kernels this one builds on; the one place a module
#   dependency is declared. Their solution libraries are linked into <dir>_solution and
#   <dir>_exercise (an exercise composes the known-good solutions of earlier modules),
#   and their API targets into <dir>_api, so every test, benchmark and demo of <dir>
#   sees their headers and links their kernels.
function(course_add_module dir)
  cmake_parse_arguments(ARG "" "" "DEPENDS" ${ARGN})
  add_library(${dir}_api INTERFACE)
  target_include_directories(${dir}_api INTERFACE "${PROJECT_SOURCE_DIR}/${dir}/include")
  target_link_libraries(${dir}_api INTERFACE course_common)
  foreach(dep IN LISTS ARG_DEPENDS)
    if(NOT TARGET ${dep}_api)
      message(FATAL_ERROR "course_add_module(${dir}): add module ${dep} before the modules that depend on it")
    endif()
    target_link_libraries(${dir}_api INTERFACE ${dep}_api)
  endforeach()
  set_property(GLOBAL PROPERTY COURSE_DEPENDS_${dir} "${ARG_DEPENDS}")
  add_subdirectory("${PROJECT_SOURCE_DIR}/solutions/${dir}" "${PROJECT_BINARY_DIR}/solutions/${dir}")
  add_subdirectory("${PROJECT_SOURCE_DIR}/exercises/${dir}" "${PROJECT_BINARY_DIR}/exercises/${dir}")
  add_subdirectory("${PROJECT_SOURCE_DIR}/${dir}" "${PROJECT_BINARY_DIR}/${dir}")
endfunction()

# course_add_impl_library(<module> <solution|exercise> SOURCES ... [LIBRARIES ...])
#   The kernels of one module for one implementation, linked with the solutions of the
#   modules it DEPENDS on (course_add_module). LIBRARIES: anything else it needs.
function(course_add_impl_library module impl)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBRARIES" ${ARGN})
  set(target ${module}_${impl})
  get_property(deps GLOBAL PROPERTY COURSE_DEPENDS_${module})
  set(dep_solutions "")
  foreach(dep IN LISTS deps)
    if(NOT TARGET ${dep}_solution)
      message(FATAL_ERROR "${target}: module ${dep} (a dependency) has no solution library")
    endif()
    list(APPEND dep_solutions ${dep}_solution)
  endforeach()
  add_library(${target} STATIC ${ARG_SOURCES})
  target_link_libraries(${target} PUBLIC ${module}_api course_common ${dep_solutions}
                        PRIVATE course_flags ${ARG_LIBRARIES})
  set_target_properties(${target} PROPERTIES
    CUDA_SEPARABLE_COMPILATION OFF
    POSITION_INDEPENDENT_CODE ON)
  if(impl STREQUAL "exercise")
    # Stubs leave helpers unused until the learner fills them in; keep the build quiet.
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--diag-suppress=177,550>)
  endif()
endfunction()

# Attach LABELS to every test gtest_discover_tests finds in <target>.
# CMake 3.25 flattens list-valued PROPERTIES passed to gtest_discover_tests, so
# only the first label would survive; instead a small CTest include file, read
# after the discovery file, sets the full label list on ${target}_TESTS.
function(_course_label_discovered_tests target labels)
  set(file "${CMAKE_CURRENT_BINARY_DIR}/${target}_labels.cmake")
  file(WRITE "${file}"
    "if(${target}_TESTS)\n"
    "  set_tests_properties(\${${target}_TESTS} PROPERTIES LABELS \"${labels}\")\n"
    "endif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${file}")
endfunction()

function(_course_discover target labels prefix)
  # The prefix keeps names unique: the same test source runs as solution and exercise.
  gtest_discover_tests(${target}
    TEST_PREFIX "${prefix}."
    NO_PRETTY_VALUES
    DISCOVERY_MODE PRE_TEST
    TEST_LIST ${target}_TESTS
    PROPERTIES TIMEOUT 600)
  _course_label_discovered_tests(${target} "${labels}")
endfunction()

# course_add_cpu_test(<name> SOURCES ... [LIBRARIES ...])
#   Host-only tests: label "cpu". They must really run on CI.
function(course_add_cpu_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBRARIES" ${ARGN})
  if(NOT COURSE_BUILD_TESTS)
    return()
  endif()
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE course_testing course_flags ${ARG_LIBRARIES})
  _course_discover(${name} "cpu" "cpu")
endfunction()

# course_add_gpu_test(<module> <name> SOURCES ... [LIBRARIES ...] [LABELS ...])
#   One test source, two executables: <name>_solution and <name>_exercise.
#   COURSE_IMPL names the namespace the test calls (course::solution or
#   course::exercise). Labels: gpu [+ LABELS] + solution|exercise. Without a device the
#   course::testing::GpuTest fixture skips each test with a message.
function(course_add_gpu_test module name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBRARIES;LABELS" ${ARGN})
  if(NOT COURSE_BUILD_TESTS)
    return()
  endif()
  foreach(impl solution exercise)
    set(target ${name}_${impl})
    add_executable(${target} ${ARG_SOURCES})
    target_compile_definitions(${target} PRIVATE COURSE_IMPL=${impl} COURSE_IMPL_NAME="${impl}")
    target_link_libraries(${target} PRIVATE ${module}_${impl} course_testing course_flags ${ARG_LIBRARIES})
    set(labels gpu ${ARG_LABELS} ${impl})
    _course_discover(${target} "${labels}" "${impl}")
  endforeach()
endfunction()

# course_add_benchmark(<module> <name> SOURCES ...)
#   One Google Benchmark binary per module, linking solution and exercise so the
#   two sit in the same table.
function(course_add_benchmark module name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBRARIES" ${ARGN})
  if(NOT COURSE_BUILD_BENCHMARKS)
    return()
  endif()
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${module}_solution ${module}_exercise course_bench course_flags ${ARG_LIBRARIES})
endfunction()

# course_add_demo(<module> <name> SOURCES ...)
#   A demo executable: the worked example and a realistic size, every step.
function(course_add_demo module name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBRARIES" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${module}_solution ${module}_exercise course_common course_flags CLI11::CLI11 ${ARG_LIBRARIES})
  set_property(GLOBAL APPEND PROPERTY COURSE_DEMOS ${name})
endfunction()

# course_module_targets(<module> <short>)
#   Builds a module folder by convention, so adding a step or an op never needs a
#   CMake edit:
#     tests/test_*.cpp      one GPU test pair each (<short>_<name>_solution/_exercise)
#     tests/fuzz_*.cpp      random-case tests, a GPU test pair each (<short>_fuzz_<name>_...), label fuzz
#     tests/planted/*.cu    deliberately wrong kernels the tests must reject (<short>_planted)
#     tests/cpu_*.cpp       one CPU test each
#     bench/*.cpp           one benchmark binary <short>_bench
#     demos/*.cpp           one demo executable each: <short>_<name>
function(course_module_targets module short)
  set(dir "${CMAKE_CURRENT_SOURCE_DIR}")
  file(GLOB planted CONFIGURE_DEPENDS "${dir}/tests/planted/*.cu")
  set(extra_libs "")
  if(planted AND COURSE_BUILD_TESTS)
    add_library(${short}_planted STATIC ${planted})
    target_include_directories(${short}_planted PUBLIC "${dir}/tests/planted")
    target_link_libraries(${short}_planted PUBLIC ${module}_api course_common PRIVATE course_flags)
    set(extra_libs ${short}_planted)
  endif()
  file(GLOB gpu_tests CONFIGURE_DEPENDS "${dir}/tests/test_*.cpp")
  foreach(src IN LISTS gpu_tests)
    get_filename_component(name "${src}" NAME_WE)
    string(REGEX REPLACE "^test_" "" name "${name}")
    course_add_gpu_test(${module} ${short}_${name} SOURCES "${src}" LIBRARIES ${extra_libs} CUDA::cublas)
  endforeach()
  file(GLOB fuzz_tests CONFIGURE_DEPENDS "${dir}/tests/fuzz_*.cpp")
  foreach(src IN LISTS fuzz_tests)
    get_filename_component(name "${src}" NAME_WE)
    course_add_gpu_test(${module} ${short}_${name} SOURCES "${src}" LIBRARIES ${extra_libs} CUDA::cublas LABELS fuzz)
  endforeach()
  file(GLOB cpu_tests CONFIGURE_DEPENDS "${dir}/tests/cpu_*.cpp")
  foreach(src IN LISTS cpu_tests)
    get_filename_component(name "${src}" NAME_WE)
    course_add_cpu_test(${short}_${name} SOURCES "${src}" LIBRARIES ${module}_api)
  endforeach()
  file(GLOB benches CONFIGURE_DEPENDS "${dir}/bench/*.cpp" "${dir}/bench/*.cu")
  if(benches)
    course_add_benchmark(${module} ${short}_bench SOURCES ${benches} LIBRARIES CUDA::cublas CUDA::cublasLt CCCL::CUB)
  endif()
  file(GLOB demos CONFIGURE_DEPENDS "${dir}/demos/*.cpp")
  foreach(src IN LISTS demos)
    get_filename_component(name "${src}" NAME_WE)
    course_add_demo(${module} ${short}_${name} SOURCES "${src}")
  endforeach()
endfunction()
