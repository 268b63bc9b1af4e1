# The README shows an example's kernel inline; this checks the copy is the
# file's, line for line.
#
#   cmake -DREADME=<README.md> -DSOURCE=<example.cu> -DTAG=<tag> -P readme_sync.cmake
#
# In SOURCE the kernel sits between the lines `// [readme:TAG]` and
# `// [/readme:TAG]`; in README inside the first ```cuda fence after the
# line `<!-- readme:TAG -->`.
cmake_minimum_required(VERSION 3.18)
foreach(var README SOURCE TAG)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "readme_sync.cmake: ${var} is not set")
  endif()
endforeach()

file(READ "${SOURCE}" src)
string(FIND "${src}" "// [readme:${TAG}]\n" a)
string(FIND "${src}" "// [/readme:${TAG}]" b)
if(a EQUAL -1 OR b EQUAL -1 OR b LESS a)
  message(FATAL_ERROR "${SOURCE}: no `// [readme:${TAG}]` ... `// [/readme:${TAG}]` block")
endif()
string(LENGTH "// [readme:${TAG}]\n" skip)
math(EXPR a "${a} + ${skip}")
math(EXPR len "${b} - ${a}")
string(SUBSTRING "${src}" ${a} ${len} from_source)

file(READ "${README}" doc)
string(FIND "${doc}" "<!-- readme:${TAG} -->" m)
if(m EQUAL -1)
  message(FATAL_ERROR "${README}: no `<!-- readme:${TAG} -->` marker")
endif()
string(SUBSTRING "${doc}" ${m} -1 doc)
string(FIND "${doc}" "```cuda\n" a)
if(a EQUAL -1)
  message(FATAL_ERROR "${README}: no ```cuda block after `<!-- readme:${TAG} -->`")
endif()
math(EXPR a "${a} + 8")
string(SUBSTRING "${doc}" ${a} -1 doc)
string(FIND "${doc}" "```" b)
string(SUBSTRING "${doc}" 0 ${b} from_readme)

if(NOT from_source STREQUAL from_readme)
  message(FATAL_ERROR "README.md's copy of ${TAG} differs from ${SOURCE}; paste the block between the markers "
                      "into the README.\n--- ${SOURCE}:\n${from_source}--- README.md:\n${from_readme}")
endif()
message(STATUS "OK: README.md shows ${TAG} exactly as ${SOURCE} has it")
