# The layering check (CTest `layering`): fails when a library file includes a header of a higher
# layer, or algo and model include each other (docs/design.md "Layers"):
#   core  <  algo, model  <  rl  <  kernels  <  cli
# A file's layer is its folder: include/turnrl/<layer>/ and src/<layer>/. The per-layer libraries
# (CMakeLists.txt) make a call upward a link error; this check catches the include before it.
#   cmake -DSOURCE_DIR=<repo> -P tests/layering.cmake
if(NOT DEFINED SOURCE_DIR)
  message(FATAL_ERROR "layering.cmake needs -DSOURCE_DIR=<repository root>")
endif()
set(layer_patterns
    "^(include/turnrl|src)/core/" core
    "^(include/turnrl|src)/algo/" algo
    "^(include/turnrl|src)/model/" model
    "^(include/turnrl|src)/rl/" rl
    "^(include/turnrl|src)/kernels/" kernels
    "^src/cli/" cli)
set(rank_core 0)
set(rank_algo 1)
set(rank_model 1)
set(rank_rl 2)
set(rank_kernels 3)
set(rank_cli 4)

function(layer_of path out)
  set(patterns ${layer_patterns})
  list(LENGTH patterns n)
  math(EXPR last "${n} - 1")
  foreach(i RANGE 0 ${last} 2)
    math(EXPR j "${i} + 1")
    list(GET patterns ${i} pattern)
    list(GET patterns ${j} layer)
    if(path MATCHES "${pattern}")
      set(${out} ${layer} PARENT_SCOPE)
      return()
    endif()
  endforeach()
  set(${out} "" PARENT_SCOPE)
endfunction()

file(GLOB_RECURSE files RELATIVE ${SOURCE_DIR} ${SOURCE_DIR}/include/turnrl/*.h ${SOURCE_DIR}/src/*.h
     ${SOURCE_DIR}/src/*.cpp ${SOURCE_DIR}/src/*.cu ${SOURCE_DIR}/src/*.cuh)
set(violations "")
foreach(file IN LISTS files)
  layer_of(${file} mine)
  if(NOT mine)
    string(APPEND violations "\n  ${file}: not in a layer folder (core, algo, model, rl, kernels, cli)")
    continue()
  endif()
  file(STRINGS ${SOURCE_DIR}/${file} includes REGEX "^[ \t]*#[ \t]*include[ \t]+\"turnrl/")
  foreach(line IN LISTS includes)
    string(REGEX REPLACE ".*\"(turnrl/[^\"]+)\".*" "include/\\1" header "${line}")
    layer_of(${header} theirs)
    if(NOT theirs)
      string(APPEND violations "\n  ${file} includes ${header}, which has no layer")
    elseif(rank_${theirs} GREATER rank_${mine} OR (rank_${theirs} EQUAL rank_${mine} AND NOT theirs STREQUAL mine))
      string(APPEND violations "\n  ${file} (${mine}) includes ${header} (${theirs})")
    endif()
  endforeach()
endforeach()
if(violations)
  message(FATAL_ERROR "upward or sideways includes:${violations}")
endif()
list(LENGTH files count)
message(STATUS "layering: ${count} files, every include goes down the layers")
