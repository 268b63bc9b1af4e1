# Configure, build and run the standalone consumer project against the
# staged install, as a downstream user would.
#
#   cmake -DSOURCE_DIR=<c_tests/consumer> -DWORK_DIR=<dir> -DPREFIX=<stage>
#         -DGENERATOR=<gen> -DMAKE_PROGRAM=<make/ninja> -DC_COMPILER=<cc> -DOBJDUMP=<objdump>
#         -DMODE=shared|static|version_mismatch -DREQUIRED_VERSION=<x.y> -P consumer_check.cmake
cmake_minimum_required(VERSION 3.18) # policies for script mode (IN_LIST, ...)
foreach(var SOURCE_DIR WORK_DIR PREFIX GENERATOR MAKE_PROGRAM C_COMPILER OBJDUMP MODE REQUIRED_VERSION)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "consumer_check.cmake: ${var} is not set")
  endif()
endforeach()

if(MODE STREQUAL "static")
  set(static ON)
else()
  set(static OFF)
endif()

file(REMOVE_RECURSE "${WORK_DIR}")
execute_process(
  COMMAND "${CMAKE_COMMAND}" -S "${SOURCE_DIR}" -B "${WORK_DIR}" -G "${GENERATOR}"
          "-DCMAKE_C_COMPILER=${C_COMPILER}" "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}" "-DCMAKE_PREFIX_PATH=${PREFIX}"
          -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF
          "-DCONSUMER_STATIC=${static}" "-DSYMM_REQUIRED_VERSION=${REQUIRED_VERSION}"
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
message(STATUS "configure:\n${out}")

if(MODE STREQUAL "version_mismatch")
  # The package is 0.x with SameMinorVersion: another minor must be refused.
  if(rc EQUAL 0)
    message(FATAL_ERROR "find_package(symmcomm ${REQUIRED_VERSION}) accepted the installed package")
  endif()
  if(NOT out MATCHES "version")
    message(FATAL_ERROR "configure failed, but not because of the version")
  endif()
  message(STATUS "OK: find_package(symmcomm ${REQUIRED_VERSION}) refused the installed version")
  return()
endif()

if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configuring the consumer failed")
endif()
# It must have found the staged package, not some other install.
if(NOT out MATCHES "symmcomm_DIR=([^\n]*)")
  message(FATAL_ERROR "the consumer did not report symmcomm_DIR")
endif()
get_filename_component(found_dir "${CMAKE_MATCH_1}" REALPATH)
get_filename_component(prefix_real "${PREFIX}" REALPATH)
string(FIND "${found_dir}" "${prefix_real}/" at)
if(NOT at EQUAL 0)
  message(FATAL_ERROR "found symmcomm in ${found_dir}, not under ${prefix_real}")
endif()

execute_process(COMMAND "${CMAKE_COMMAND}" --build "${WORK_DIR}" --verbose
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
message(STATUS "build:\n${out}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "building the consumer failed")
endif()

set(exe "${WORK_DIR}/consumer")
execute_process(COMMAND "${OBJDUMP}" -p "${exe}" OUTPUT_VARIABLE dyn)
if(static AND dyn MATCHES "NEEDED +libsymmcomm")
  message(FATAL_ERROR "the static consumer still needs libsymmcomm.so")
elseif(NOT static AND NOT dyn MATCHES "NEEDED +libsymmcomm\\.so\\.[0-9]+\n")
  message(FATAL_ERROR "the shared consumer does not record the soname libsymmcomm.so.N:\n${dyn}")
endif()

execute_process(COMMAND "${exe}" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
message(STATUS "run:\n${out}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the consumer failed (exit ${rc})")
endif()
message(STATUS "OK: ${MODE} consumer")
