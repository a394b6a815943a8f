# Every dependency through its CMake package; a missing one stops configure with
# the package a learner has to install.
function(course_require_package pkg hint)
  find_package(${pkg} ${ARGN} QUIET)
  if(NOT ${pkg}_FOUND)
    message(FATAL_ERROR
      "course: required package '${pkg}' was not found.\n"
      "  Install it with: ${hint}\n"
      "  (or point CMAKE_PREFIX_PATH at its install prefix)")
  endif()
endfunction()

course_require_package(CUDAToolkit "the CUDA Toolkit 12.x/13.x from NVIDIA (nvcc, cuBLAS, CCCL)")
foreach(_lib cudart cublas cublasLt)
  if(NOT TARGET CUDA::${_lib})
    message(FATAL_ERROR "course: CUDA::${_lib} is missing from the CUDA Toolkit at ${CUDAToolkit_LIBRARY_DIR}")
  endif()
endforeach()
# CCCL (CUB, Thrust, libcu++) ships a CMake config with the toolkit; its folder differs
# between installs (lib/cmake, lib64/cmake, targets/<arch>/lib/cmake).
find_package(CCCL CONFIG QUIET
  HINTS "${CUDAToolkit_LIBRARY_DIR}/cmake/cccl" "${CUDAToolkit_TARGET_DIR}/lib/cmake/cccl"
        "${CUDAToolkit_TARGET_DIR}/lib64/cmake/cccl" "${CUDAToolkit_LIBRARY_ROOT}/lib/cmake/cccl"
        "${CUDAToolkit_LIBRARY_ROOT}/lib64/cmake/cccl")
if(NOT TARGET CCCL::CUB)
  # nvcc puts the toolkit's CCCL headers on the include path by itself, so device code
  # still finds CUB; host-only code gets the toolkit's include folders.
  message(STATUS "course: CCCL CMake config not found; using the toolkit's bundled CUB headers")
  add_library(CCCL::CUB INTERFACE IMPORTED)
  set_target_properties(CCCL::CUB PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${CUDAToolkit_INCLUDE_DIRS}")
endif()

if(COURSE_BUILD_TESTS)
  course_require_package(GTest "sudo apt-get install libgtest-dev")
  include(GoogleTest)
endif()
if(COURSE_BUILD_BENCHMARKS)
  course_require_package(benchmark "sudo apt-get install libbenchmark-dev")
endif()
course_require_package(CLI11 "sudo apt-get install libcli11-dev" CONFIG)
