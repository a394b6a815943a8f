# Doxygen input filter for the course's headers:  cmake -P doxygen_filter.cmake <file>
# Prints <file> to stdout with every
#
#     COURSE_DECLARE_FOR_BOTH_IMPLS( /// doc
#                                    void f(...); )
#
# written out as `namespace course::solution { ... } namespace course::exercise { ... }`.
# Doxygen's own macro expansion would move the `///` comments out of the macro
# argument, so each function would lose its documentation to the namespace.
# The module namespace is written as a using-directive instead of `::course::m01::`
# in every parameter, so Doxygen matches each declaration with its definition in
# solutions/ and exercises/ (which spell the types unqualified) instead of listing
# both.
# The solution copy keeps the original line numbers (warnings point at the right
# line); the exercise copy follows it.
cmake_minimum_required(VERSION 3.25)

set(input "${CMAKE_ARGV3}")
file(READ "${input}" text)

set(out "")
set(macro "COURSE_DECLARE_FOR_BOTH_IMPLS(")
string(LENGTH "${macro}" macro_len)
while(TRUE)
  # An invocation starts a line (the #define in course/impl.hpp does not).
  string(REGEX MATCH "(^|\n)COURSE_DECLARE_FOR_BOTH_IMPLS\\(" hit "${text}")
  if(NOT hit)
    break()
  endif()
  string(FIND "${text}" "${hit}" pos)
  string(LENGTH "${hit}" hit_len)
  math(EXPR body_start "${pos} + ${hit_len}")
  string(SUBSTRING "${text}" 0 ${body_start} head)
  string(SUBSTRING "${text}" ${body_start} -1 rest)
  string(LENGTH "${head}" head_len)
  math(EXPR head_keep "${head_len} - ${macro_len}")
  string(SUBSTRING "${head}" 0 ${head_keep} head)

  # Find the parenthesis that closes the invocation.
  string(LENGTH "${rest}" rest_len)
  set(depth 1)
  set(i 0)
  while(depth GREATER 0 AND i LESS rest_len)
    string(SUBSTRING "${rest}" ${i} 1 c)
    if(c STREQUAL "(")
      math(EXPR depth "${depth} + 1")
    elseif(c STREQUAL ")")
      math(EXPR depth "${depth} - 1")
    endif()
    math(EXPR i "${i} + 1")
  endwhile()
  if(depth GREATER 0)
    break()  # unbalanced: leave the rest as it is
  endif()
  math(EXPR body_len "${i} - 1")
  string(SUBSTRING "${rest}" 0 ${body_len} body)
  string(SUBSTRING "${rest}" ${i} -1 text)

  string(REGEX MATCHALL "::course::m[0-9]+::" module_namespaces "${body}")
  list(REMOVE_DUPLICATES module_namespaces)
  set(usings "")
  foreach(ns IN LISTS module_namespaces)
    string(REGEX REPLACE "^::(.*)::$" "\\1" ns "${ns}")
    string(APPEND usings " using namespace ${ns};")
  endforeach()
  string(REGEX REPLACE "::course::m[0-9]+::" "" body "${body}")
  string(APPEND out "${head}namespace course::solution {${usings}${body}} "
                    "namespace course::exercise {${usings}${body}}")
endwhile()
string(APPEND out "${text}")
file(WRITE "/dev/stdout" "${out}")
