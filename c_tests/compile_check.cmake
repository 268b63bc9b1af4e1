# Compile one source with -fsyntax-only once per language standard, so that
# a header that does not compile fails a test instead of the build.
#
#   cmake -DCOMPILER=<cc> -DSOURCE=<file> -DINCLUDE_DIR=<dir>
#         -DSTANDARDS=<std,...> -DFLAGS=<flag,...> -P compile_check.cmake
#
# Lists are comma-separated: add_test() would split a ';' list into
# separate arguments.
cmake_minimum_required(VERSION 3.18) # policies for script mode (IN_LIST, ...)
foreach(var COMPILER SOURCE INCLUDE_DIR STANDARDS)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "compile_check.cmake: ${var} is not set")
  endif()
endforeach()

string(REPLACE "," ";" STANDARDS "${STANDARDS}")
string(REPLACE "," ";" FLAGS "${FLAGS}")
foreach(std IN LISTS STANDARDS)
  set(cmd "${COMPILER}" -fsyntax-only "-std=${std}" ${FLAGS} "-I${INCLUDE_DIR}" "${SOURCE}")
  string(REPLACE ";" " " shown "${cmd}")
  message(STATUS "${shown}")
  execute_process(COMMAND ${cmd} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "header does not compile with -std=${std}:\n${out}")
  endif()
endforeach()
message(STATUS "OK: ${SOURCE} compiles with ${STANDARDS}")
