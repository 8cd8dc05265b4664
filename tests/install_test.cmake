# The install as a user gets it, relocated and cut off from this checkout:
#  1. installs the built tree into a scratch prefix, then moves that prefix elsewhere (outside the
#     build tree), so the configured install prefix does not have it either;
#  2. with every TURNRL_* variable unset and, where bubblewrap works, the build and source trees
#     hidden under empty tmpfs mounts, runs the moved `turnrl --version` and `turnrl
#     evaluate-kernel` on a built-in task (worker program, candidate headers and config all found
#     relative to the program);
#  3. builds examples/external_project and a copied-out examples/custom_trainer.cpp against the
#     moved prefix with find_package(turnrl), and runs both (custom_trainer for one small step).
foreach(var BUILD_DIR SOURCE_DIR REPO_DIR WORK_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "install_test.cmake needs -D${var}=...")
  endif()
endforeach()
file(REMOVE_RECURSE ${WORK_DIR})
string(RANDOM LENGTH 8 suffix)
if(DEFINED ENV{TMPDIR} AND IS_DIRECTORY "$ENV{TMPDIR}")
  set(moved "$ENV{TMPDIR}/turnrl_install_test_${suffix}")
else()
  set(moved "/tmp/turnrl_install_test_${suffix}")
endif()

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    file(REMOVE_RECURSE ${moved})
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix)
file(COPY ${WORK_DIR}/prefix/ DESTINATION ${moved})
file(REMOVE_RECURSE ${WORK_DIR}/prefix)

# What a user's shell has: no TURNRL_* variables, the moved bin/ on PATH.
set(clean_env ${CMAKE_COMMAND} -E env --unset=TURNRL_WORKER_DIR --unset=TURNRL_INCLUDE_DIR --unset=TURNRL_DATA_DIR
              --unset=TURNRL_PYTHON_WORKER --unset=TURNRL_SOURCE_DIR --unset=TURNRL_EVAL_CACHE
              "PATH=${moved}/bin:$ENV{PATH}")
set(hide_trees "")
find_program(BWRAP bwrap)
if(BWRAP)
  execute_process(COMMAND ${BWRAP} --dev-bind / / --tmpfs ${BUILD_DIR} --tmpfs ${REPO_DIR} true RESULT_VARIABLE bwrap_rc
                  OUTPUT_QUIET ERROR_QUIET)
  if(bwrap_rc EQUAL 0)
    set(hide_trees ${BWRAP} --dev-bind / / --tmpfs ${BUILD_DIR} --tmpfs ${REPO_DIR})
  endif()
endif()
if(hide_trees)
  message(STATUS "build and source trees hidden with bubblewrap")
else()
  message(STATUS "bubblewrap unavailable: the trees stay visible; the moved prefix is outside both")
endif()

run(${clean_env} ${hide_trees} ${moved}/bin/turnrl --version)
if(NOT last_output MATCHES "turnrl [0-9]+\\.[0-9]+\\.[0-9]+.*LibTorch")
  message(FATAL_ERROR "unexpected turnrl --version output: ${last_output}")
endif()
file(COPY ${REPO_DIR}/tests/data/cpu_tasks/relu_bias/honest.cpp DESTINATION ${moved}/work)
run(${clean_env} TURNRL_EVAL_CACHE=${moved}/work/cache ${hide_trees} ${moved}/bin/turnrl evaluate-kernel relu_bias
    ${moved}/work/honest.cpp --set env.timing_trials=3)
if(NOT last_output MATCHES "correct: yes")
  file(REMOVE_RECURSE ${moved})
  message(FATAL_ERROR "installed turnrl evaluate-kernel did not pass an honest candidate:\n${last_output}")
endif()
message(STATUS "installed evaluate-kernel: ${last_output}")

# A user's own trainers, built against the moved prefix.
string(REPLACE "|" "\\;" prefix_path "${moved}|${PREFIX_PATH}")
run(${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/build -DCMAKE_BUILD_TYPE=Release "-DCMAKE_PREFIX_PATH=${prefix_path}")
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run(${WORK_DIR}/build/my_trainer)
# TRLOO of rewards [1, 0] and [0.5, 0.5]: +1, -1, 0, 0.
if(NOT last_output MATCHES "1.00 -1.00 0.00 0.00")
  message(FATAL_ERROR "unexpected output of my_trainer: ${last_output}")
endif()
message(STATUS "external project output: ${last_output}")

file(COPY ${REPO_DIR}/examples/custom_trainer.cpp DESTINATION ${WORK_DIR}/custom)
file(WRITE ${WORK_DIR}/custom/CMakeLists.txt [=[
cmake_minimum_required(VERSION 3.18)
project(custom_trainer LANGUAGES CXX)
set(CMAKE_CXX_STANDARD 17)
find_package(turnrl REQUIRED)
add_executable(custom_trainer custom_trainer.cpp)
target_link_libraries(custom_trainer PRIVATE turnrl::turnrl)
]=])
run(${CMAKE_COMMAND} -S ${WORK_DIR}/custom -B ${WORK_DIR}/custom/build -DCMAKE_BUILD_TYPE=Release
    "-DCMAKE_PREFIX_PATH=${prefix_path}")
run(${CMAKE_COMMAND} --build ${WORK_DIR}/custom/build)
file(COPY ${WORK_DIR}/custom/build/custom_trainer DESTINATION ${moved}/work)
run(${clean_env} TURNRL_EVAL_CACHE=${moved}/work/cache ${hide_trees} ${moved}/work/custom_trainer
    --set trainer.steps=1 --set trainer.tasks_per_step=1 --set trainer.samples_per_task=2 --set env.max_turns=1
    --set env.timing_trials=2 --set run.dir=${moved}/work/run --set run.progress=false)
message(STATUS "copied-out custom_trainer: ${last_output}")
file(REMOVE_RECURSE ${moved})
