# Compile one CUDA source with nvcc for every (architecture, C++ standard)
# pair, every warning an error, so that a device header that does not
# compile (or whose static_asserts fail) fails a test instead of the build.
#
#   cmake -DNVCC=<nvcc> -DSOURCE=<file.cu> -DINCLUDES=<dir,...> -DOUT=<prefix>
#         [-DCCBIN=<host compiler>] -P nvcc_check.cmake
cmake_minimum_required(VERSION 3.18)
foreach(var NVCC SOURCE INCLUDES OUT)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "nvcc_check.cmake: ${var} is not set")
  endif()
endforeach()
string(REPLACE "," ";" INCLUDES "${INCLUDES}")
set(incs "")
foreach(d IN LISTS INCLUDES)
  list(APPEND incs "-I${d}")
endforeach()
set(ccbin "")
if(CCBIN)
  set(ccbin "-ccbin=${CCBIN}")
endif()
foreach(arch 80 90)
  foreach(std c++17 c++20)
    set(cmd "${NVCC}" -c "-std=${std}" "-gencode=arch=compute_${arch},code=sm_${arch}" -Werror all-warnings
            ${ccbin} ${incs} -o "${OUT}_sm${arch}_${std}.o" "${SOURCE}")
    string(REPLACE ";" " " shown "${cmd}")
    message(STATUS "${shown}")
    execute_process(COMMAND ${cmd} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "${SOURCE} does not compile for sm_${arch} with -std=${std}:\n${out}")
    endif()
  endforeach()
endforeach()
message(STATUS "OK: ${SOURCE} compiles for sm_80 and sm_90 with C++17 and C++20")
