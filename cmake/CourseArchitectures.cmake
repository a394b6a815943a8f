# Choose the CUDA architectures before project() enables CUDA.
#
# * -DCMAKE_CUDA_ARCHITECTURES=... always wins.
# * With a GPU visible (nvidia-smi answers), build for that GPU only ("native"):
#   fastest compile, and the code the learner's benchmarks run.
# * Without one (CI, a laptop), an explicit list: Ampere (sm_80) and Hopper (sm_90a).
#   Everything in the course runs on sm_80+; Hopper-only steps are guarded in code.
# * Hopper (compute capability 9.0) is always built as "90a", the architecture-specific
#   target: wgmma (module 2's top step) exists only there, not in plain sm_90. sm_90a
#   code runs on H100/H200 only, which is the GPU it was chosen for.
if(DEFINED CMAKE_CUDA_ARCHITECTURES OR DEFINED ENV{CUDAARCHS})
  return()
endif()

set(_course_default_archs "80;90a")
find_program(_course_nvidia_smi nvidia-smi)
if(_course_nvidia_smi)
  execute_process(
    COMMAND "${_course_nvidia_smi}" --query-gpu=compute_cap --format=csv,noheader
    RESULT_VARIABLE _course_smi_rc
    OUTPUT_VARIABLE _course_smi_out
    ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(_course_smi_rc EQUAL 0 AND _course_smi_out MATCHES "^([0-9]+)\\.([0-9]+)")
    if(CMAKE_MATCH_1 LESS 8)
      message(WARNING "course: the GPU here is sm_${CMAKE_MATCH_1}${CMAKE_MATCH_2}; the course needs sm_80 "
                      "or newer. Building for ${_course_default_archs}; GPU tests will skip.")
    else()
      set(_course_default_archs "${CMAKE_MATCH_1}${CMAKE_MATCH_2}")
      if(_course_default_archs STREQUAL "90")
        set(_course_default_archs "90a")
      endif()
      message(STATUS "course: GPU found (compute capability ${CMAKE_MATCH_1}.${CMAKE_MATCH_2})")
    endif()
  endif()
endif()
set(CMAKE_CUDA_ARCHITECTURES "${_course_default_archs}" CACHE STRING
    "CUDA architectures to build for (e.g. 80;90a)")
message(STATUS "course: CMAKE_CUDA_ARCHITECTURES=${CMAKE_CUDA_ARCHITECTURES}")
